"""Small random-init checkpoints in the real on-disk layouts (seconds to build): a byte-level BPE tokenizer,
a Llama target, a smaller Llama draft, Medusa heads and an EAGLE-1 head. Used when the shipped
checkpoints/tiny are absent; the Triton plumbing is what is under test, not the models' quality."""

from __future__ import annotations

from pathlib import Path

CORPUS = [
    "def add(a, b):\n    return a + b\n",
    "def mul(a, b):\n    return a * b\n",
    "for i in range(10):\n    print(i)\n",
    "The quick brown fox jumps over the lazy dog. The dog sleeps.",
    "class Point:\n    def __init__(self, x, y):\n        self.x = x\n        self.y = y\n",
    "Summarise: the meeting moved to Tuesday. Summary: the meeting is on Tuesday.",
    "User: hello there\nAssistant: hello, how can I help?\n",
    "import os\nimport sys\nprint(os.getcwd(), sys.argv)\n",
] * 8


def build_tokenizer(folder: Path):
    """The byte-level BPE tokenizer of the zoo (<s> prepended, </s> = end = pad), trained on CORPUS."""
    from specbuild.zoo.tokenizer import save_tokenizer, train_tokenizer

    tokenizer = train_tokenizer(CORPUS, vocab_size=320)
    save_tokenizer(tokenizer, folder)
    return tokenizer


def build_tiny_checkpoints(root: Path) -> dict[str, Path]:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from specbuild.heads.eagle import EagleHeadModule, eagle_config_dict, save_eagle_head
    from specbuild.heads.medusa import MedusaHeadsModule, save_medusa_heads
    from specbuild.zoo.tokenizer import save_tokenizer

    torch.manual_seed(0)
    tokenizer = build_tokenizer(root / "tokenizer")
    vocab = len(tokenizer)

    def llama(hidden, layers, heads, intermediate):
        config = LlamaConfig(
            vocab_size=vocab,
            hidden_size=hidden,
            num_hidden_layers=layers,
            num_attention_heads=heads,
            num_key_value_heads=heads,
            intermediate_size=intermediate,
            max_position_embeddings=512,
            bos_token_id=1,
            eos_token_id=2,
            pad_token_id=2,
            tie_word_embeddings=False,
        )
        return LlamaForCausalLM(config)

    paths = {name: root / name for name in ("target", "draft", "medusa", "eagle")}
    target = llama(32, 2, 2, 64)
    draft = llama(16, 1, 2, 32)
    for name, model in (("target", target), ("draft", draft)):
        model.save_pretrained(str(paths[name]))
        save_tokenizer(tokenizer, paths[name])
    heads = MedusaHeadsModule(32, vocab, num_heads=3, num_layers=1)
    heads.init_from_lm_head(target.lm_head.weight)
    save_medusa_heads(heads, paths["medusa"], dtype=torch.float32)
    head_config = LlamaConfig(
        **{k: v for k, v in eagle_config_dict(target.config, 1).items() if k not in ("architectures", "model_type")}
    )
    save_eagle_head(EagleHeadModule(head_config), paths["eagle"], dtype=torch.float32)
    return paths
