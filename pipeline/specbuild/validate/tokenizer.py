"""The deployment's tokenizer on the client side, when it is on this machine (the stop-word check needs it).

Loaded from `tokenizer.json` with the `tokenizers` library (cheap), else with transformers' AutoTokenizer.
"""

from __future__ import annotations

import os
from pathlib import Path


class ClientTokenizer:
    def __init__(self, path: Path, encode, decode):
        self.path = path
        self._encode = encode
        self._decode = decode

    def encode(self, text: str) -> list[int]:
        """Token ids without special tokens (as the preprocessing model encodes stop words)."""
        return list(self._encode(text))

    def decode(self, ids: list[int]) -> str:
        return self._decode(list(ids))


def load_tokenizer(folder: Path | None) -> ClientTokenizer | None:
    """The tokenizer in `folder`, or None when there is none to load."""
    if folder is None or not Path(folder).is_dir():
        return None
    folder = Path(folder)
    if (folder / "tokenizer.json").is_file():
        try:
            from tokenizers import Tokenizer

            tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
            return ClientTokenizer(folder, lambda t: tok.encode(t, add_special_tokens=False).ids,
                                   lambda ids: tok.decode(ids, skip_special_tokens=True))
        except Exception:  # noqa: BLE001 - fall back on transformers
            pass
    try:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(str(folder))
        return ClientTokenizer(folder, lambda t: tok.encode(t, add_special_tokens=False),
                               lambda ids: tok.decode(ids, skip_special_tokens=True))
    except Exception:  # noqa: BLE001 - no usable tokenizer here
        return None
