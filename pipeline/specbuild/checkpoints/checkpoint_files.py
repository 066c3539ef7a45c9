"""Reading Hugging Face checkpoint configs and tokenizers (the method modules' and runtimes' file checks, the engine
facts). Reads go through specbuild.files.safe_files: bounded, regular files only (a FIFO or device never blocks),
symlinks kept inside the checkpoint (or its Hugging Face hub-cache repository folder)."""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specbuild.files.safe_files import MiB, UnreadableFile, read_bytes, read_json

CONFIG_MAX = 4 * MiB  # a config.json is a few KiB
TOKENIZER_MAX = 256 * MiB  # a tokenizer.json of a large-vocabulary model is tens of MiB
SENTENCEPIECE_MAX = 64 * MiB  # a SentencePiece tokenizer.model is a few MiB (Llama 2: 500 KiB)
WEIGHT_PATTERNS = ("*.safetensors", "*.bin", "*.pt", "*.pth", "*.safetensors.index.json", "*.bin.index.json")


def checkpoint_root(folder: Path) -> Path:
    """The folder symlinks of a checkpoint may point into: the hub-cache repository (snapshots/<rev>/ ->
    ../../blobs/) for a snapshot folder, else the folder itself."""
    folder = Path(folder)
    if folder.parent.name == "snapshots":
        return folder.parent.parent
    return folder


def config_problem(folder: Path) -> str | None:
    """Why the folder's config.json cannot be used (None when it can)."""
    try:
        read_json(
            Path(folder) / "config.json",
            what="Hugging Face config.json",
            max_bytes=CONFIG_MAX,
            root=checkpoint_root(folder),
        )
    except UnreadableFile as e:
        return e.reason
    return None


def read_hf_config(folder: Path) -> dict[str, Any] | None:
    """The folder's config.json as a dict, or None when it is missing, unreadable or not a JSON object
    (`config_problem` says why)."""
    try:
        return read_json(
            Path(folder) / "config.json",
            what="Hugging Face config.json",
            max_bytes=CONFIG_MAX,
            root=checkpoint_root(folder),
        )
    except UnreadableFile:
        return None


def architecture(folder: Path) -> str | None:
    cfg = read_hf_config(folder)
    if not cfg:
        return None
    archs = cfg.get("architectures") or []
    return archs[0] if isinstance(archs, list) and archs and isinstance(archs[0], str) else None


def has_weights(folder: Path) -> bool:
    return any(any(Path(folder).glob(pattern)) for pattern in WEIGHT_PATTERNS)


class SentencePieceMissing(Exception):
    """The sentencepiece library is not installed: a tokenizer.model cannot be loaded here."""


SKIPPED_SENTENCEPIECE = (
    "tokenizer.model (SentencePiece) not loaded: the sentencepiece library is not installed "
    "(pip install 'specbuild[reference]') — its vocabulary size and the draft's tokenizer were "
    "not compared"
)


@dataclass(frozen=True)
class SentencePieceVocab:
    """What a SentencePiece tokenizer.model defines (sentencepiece's SentencePieceProcessor)."""

    pieces: tuple[str, ...]  # id -> piece
    bos_id: int
    eos_id: int
    unk_id: int


def _sentencepiece_file(folder: Path) -> Path | None:
    """The folder's tokenizer.model when it has no tokenizer.json (which transformers prefers when both exist)."""
    folder = Path(folder)
    if (folder / "tokenizer.json").exists() or (folder / "tokenizer.json").is_symlink():
        return None
    path = folder / "tokenizer.model"
    return path if path.exists() or path.is_symlink() else None


def sentencepiece_vocab(folder: Path) -> SentencePieceVocab | str | None:
    """The folder's SentencePiece tokenizer.model loaded with the sentencepiece library (None: the folder has
    none, or a tokenizer.json that takes precedence; a str: why it does not load). Raises SentencePieceMissing
    when the library is not installed."""
    path = _sentencepiece_file(folder)
    if path is None:
        return None
    try:
        data = read_bytes(path, what="tokenizer.model", max_bytes=SENTENCEPIECE_MAX, root=checkpoint_root(folder))
    except UnreadableFile as e:
        return f"tokenizer.model {e.reason}"
    return _load_sentencepiece(data)


@functools.lru_cache(maxsize=8)
def _load_sentencepiece(data: bytes) -> SentencePieceVocab | str:
    try:
        import sentencepiece
    except ImportError:
        raise SentencePieceMissing() from None
    processor = sentencepiece.SentencePieceProcessor()
    try:
        processor.LoadFromSerializedProto(data)
    except Exception as e:  # noqa: BLE001 - sentencepiece raises RuntimeError / OSError with the parser's reason
        return f"tokenizer.model does not load with sentencepiece ({str(e).splitlines()[0][:200]})"
    pieces = tuple(processor.IdToPiece(i) for i in range(processor.GetPieceSize()))
    return SentencePieceVocab(pieces, processor.bos_id(), processor.eos_id(), processor.unk_id())


def tokenizer_problem(folder: Path) -> str | None:
    """Why the folder's tokenizer.json (or, without one, its SentencePiece tokenizer.model) cannot be used (None
    when it can, when there is none: a tokenizer may come as vocab.json instead, or when sentencepiece is not
    installed: `tokenizer_skipped` says so)."""
    path = Path(folder) / "tokenizer.json"
    if not path.exists() and not path.is_symlink():
        try:
            found = sentencepiece_vocab(folder)
        except SentencePieceMissing:
            return None
        return found if isinstance(found, str) else None
    try:
        data = read_json(path, what="tokenizer.json", max_bytes=TOKENIZER_MAX, root=checkpoint_root(folder))
    except UnreadableFile as e:
        return f"tokenizer.json {e.reason}"
    if not isinstance(data.get("model"), dict):
        return 'tokenizer.json has no "model" object — it is not a Hugging Face tokenizers file'
    try:
        from tokenizers import Tokenizer
    except ImportError:  # the recipe extras are not installed: the shape check above is what can be done
        return None
    try:
        Tokenizer.from_str(json.dumps(data))
    except Exception as e:  # noqa: BLE001 - tokenizers raises its own exception type with the reason
        return f"tokenizer.json does not load with the tokenizers library ({str(e).splitlines()[0][:200]})"
    return None


def _tokenizer_json(folder: Path) -> tuple[dict, object] | None:
    """(the folder's tokenizer.json, its model's "vocab": a dict of token -> id, or a list for Unigram), or None
    when there is no readable tokenizer.json."""
    try:
        data = read_json(
            Path(folder) / "tokenizer.json",
            what="tokenizer.json",
            max_bytes=TOKENIZER_MAX,
            root=checkpoint_root(folder),
        )
    except UnreadableFile:
        return None
    model = data.get("model")
    return data, model.get("vocab") if isinstance(model, dict) else None


def tokenizer_skipped(folder: Path) -> str | None:
    """What `check` could not load of the folder's tokenizer here, and why (None: nothing skipped)."""
    try:
        sentencepiece_vocab(folder)
    except SentencePieceMissing:
        return SKIPPED_SENTENCEPIECE
    return None


def _loaded_sentencepiece(folder: Path) -> SentencePieceVocab | None:
    try:
        found = sentencepiece_vocab(folder)
    except SentencePieceMissing:
        return None
    return found if isinstance(found, SentencePieceVocab) else None


def tokenizer_size(folder: Path) -> int | None:
    """1 + the largest id of the folder's tokenizer.json vocabulary (or its SentencePiece tokenizer.model's piece
    count), or None when there is none to read (a vocab.json tokenizer, sentencepiece not installed). Added tokens
    are not counted: checkpoints often carry a special token added after training (a pad id equal to vocab_size)
    that ordinary text never produces."""
    if (spm := _loaded_sentencepiece(folder)) is not None:
        return len(spm.pieces)
    _, vocab = _tokenizer_json(folder) or ({}, None)
    if isinstance(vocab, dict):
        ids = [v for v in vocab.values() if isinstance(v, int) and not isinstance(v, bool)]
        return max(ids) + 1 if ids else None
    return len(vocab) if isinstance(vocab, list) and vocab else None  # Unigram: a list, ids are its indices


def _vocab(folder: Path) -> tuple | None:
    found = _tokenizer_json(folder)
    if found is None:
        return None
    data, vocab = found
    added_tokens = data.get("added_tokens")
    added = (
        sorted((str(t.get("id")), str(t.get("content"))) for t in added_tokens if isinstance(t, dict))
        if isinstance(added_tokens, list)
        else []
    )
    if isinstance(vocab, dict):
        vocab = sorted(vocab.items())
    return (json.dumps(vocab), tuple(added))


def same_tokenizer(a: Path, b: Path) -> bool | None:
    """True/False when both folders hold a tokenizer.json, or both a SentencePiece tokenizer.model, to compare;
    None when that cannot be told."""
    sa, sb = _loaded_sentencepiece(Path(a)), _loaded_sentencepiece(Path(b))
    if sa is not None and sb is not None:
        return sa == sb
    va, vb = _vocab(Path(a)), _vocab(Path(b))
    if va is None or vb is None:
        return None
    return va == vb
