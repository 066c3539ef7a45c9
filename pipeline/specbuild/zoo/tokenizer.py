"""Byte-level BPE tokenizer trained on the corpus, saved as a transformers tokenizer folder."""

from __future__ import annotations

from pathlib import Path

UNK, BOS, EOS = "<unk>", "<s>", "</s>"  # ids 0, 1, 2 (the Llama convention); pad = eos
SPECIAL_TOKENS = [UNK, BOS, EOS]


def train_tokenizer(documents: list[str], vocab_size: int):
    """Train the BPE and wrap it as a `PreTrainedTokenizerFast` that prepends <s> like Llama's."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token=None, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(documents, trainer=trainer, length=len(documents))
    bos_id = tok.token_to_id(BOS)
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, bos_id)]
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=BOS,
        eos_token=EOS,
        unk_token=UNK,
        pad_token=EOS,
        model_max_length=2048,
        padding_side="left",
        clean_up_tokenization_spaces=False,
    )
    return fast


def save_tokenizer(tokenizer, folder: Path) -> None:
    """Save tokenizer.json + tokenizer_config.json, portable to transformers 4.x and 5.x.

    transformers 5 writes `"tokenizer_class": "TokenizersBackend"` (and a `backend` key), which 4.x (as in
    NVIDIA's Triton containers) cannot resolve; `PreTrainedTokenizerFast` loads in both.
    """
    import json

    folder = Path(folder)
    tokenizer.save_pretrained(str(folder))
    config_path = folder / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config.pop("backend", None)
    for key in ("is_local", "local_files_only"):  # how a loaded tokenizer was found, not what it is
        config.pop(key, None)
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
