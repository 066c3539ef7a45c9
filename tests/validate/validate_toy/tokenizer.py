"""A `tokenizer.json` for the toy model's byte tokens (id = byte + 3; 0 <pad>, 1 <s>, 2 </s>), made with the
`tokenizers` library: byte-level pre-tokenizer and decoder, a BPE with one entry per byte and no merges."""

from __future__ import annotations

from pathlib import Path


def bytes_to_unicode() -> dict[int, str]:
    """The byte-level alphabet (GPT-2's): printable bytes map to themselves, the others to code points 256+."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
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
