"""A `tokenizer.json` for the toy model's byte tokens (id = byte + 3; 0 <pad>, 1 <s>, 2 </s>), made with the
`tokenizers` library: byte-level pre-tokenizer and decoder, a BPE with one entry per byte and no merges."""

from __future__ import annotations

from pathlib import Path


def bytes_to_unicode() -> dict[int, str]:
    """The byte-level alphabet (GPT-2's): printable bytes map to themselves, the others to code points 256+."""
    printable = (
        list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    )
    mapping, extra = {}, 0
    for b in range(256):
        if b in printable:
            mapping[b] = chr(b)
        else:
            mapping[b] = chr(256 + extra)
            extra += 1
    return mapping


def write_toy_tokenizer(folder: Path) -> Path:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2}
    vocab.update({ch: b + 3 for b, ch in bytes_to_unicode().items()})
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(["<pad>", "<s>", "</s>"])
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    return folder


TEMPLATE = Path(__file__).with_name("llama-3.1-chat_template.jinja")
# Llama-3's special tokens with their ids in meta-llama/Llama-3.1-8B-Instruct's tokenizer.json (real-checkpoints.md)
LLAMA3_SPECIALS = {
    "<|begin_of_text|>": 128000,
    "<|end_of_text|>": 128001,
    "<|start_header_id|>": 128006,
    "<|end_header_id|>": 128007,
    "<|eom_id|>": 128008,
    "<|eot_id|>": 128009,
    "<|python_tag|>": 128010,
}


def write_llama31_chat_tokenizer(folder: Path) -> Path:
    """A stand-in for meta-llama/Llama-3.1-8B-Instruct's tokenizer: the toy byte tokens (so that its ids of plain
    text are the toy server's), Llama-3's special tokens (added after them: the real ids are 128000+), a
    post-processor that prepends <|begin_of_text|> as Llama-3's does, and tokenizer_config.json carrying
    Llama-3.1's chat template (llama-3.1-chat_template.jinja beside this file: the `chat_template` of the
    published tokenizer_config.json, as quoted by pytorch/serve's test_example_vllm_lora.py for
    Meta-Llama-3.1-8B) with bos <|begin_of_text|> and eos <|eot_id|>."""
    import json

    from tokenizers import Tokenizer, processors

    folder = write_toy_tokenizer(folder)
    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tok.add_special_tokens(list(LLAMA3_SPECIALS))
    bos = "<|begin_of_text|>"
    tok.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, tok.token_to_id(bos))]
    )
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "bos_token": bos,
                "eos_token": "<|eot_id|>",
                "clean_up_tokenization_spaces": True,
                "model_input_names": ["input_ids", "attention_mask"],
                "model_max_length": 131072,
                "tokenizer_class": "PreTrainedTokenizerFast",
                "chat_template": TEMPLATE.read_text(),
            },
            indent=2,
        )
    )
    return folder
