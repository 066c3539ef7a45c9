"""Reading Hugging Face checkpoint configs and tokenizers (shared by the method modules' file checks and the
runtimes)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def read_hf_config(folder: Path) -> dict[str, Any] | None:
    """The folder's config.json as a dict, or None when it is missing, unreadable or not a JSON object."""
    try:
        data = json.loads((Path(folder) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def architecture(folder: Path) -> str | None:
    cfg = read_hf_config(folder)
    if not cfg:
        return None
    archs = cfg.get("architectures") or []
    return archs[0] if isinstance(archs, list) and archs and isinstance(archs[0], str) else None


def _vocab(folder: Path) -> tuple | None:
    try:
        data = json.loads((folder / "tokenizer.json").read_text())
    except (OSError, ValueError):
        return None
    vocab = (data.get("model") or {}).get("vocab")
    added = sorted((t.get("id"), t.get("content")) for t in data.get("added_tokens") or [])
    if isinstance(vocab, dict):
        vocab = sorted(vocab.items())
    return (json.dumps(vocab), tuple(added))


def same_tokenizer(a: Path, b: Path) -> bool | None:
    """True/False when both folders hold a tokenizer.json to compare; None when that cannot be told."""
    va, vb = _vocab(Path(a)), _vocab(Path(b))
    if va is None or vb is None:
        return None
    return va == vb
