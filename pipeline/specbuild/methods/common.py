"""Reading Hugging Face checkpoint configs and tokenizers (shared by the method modules' file checks and the
runtimes). Reads go through specbuild.safe_files: bounded, regular files only (a FIFO or device never blocks),
symlinks kept inside the checkpoint (or its Hugging Face hub-cache repository folder)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

from specbuild import checkpoint_tensors
from specbuild.checkpoint_tensors import CAUSAL_LM, EAGLE1, Layout
from specbuild.methods.base import Finding
from specbuild.safe_files import MiB, UnreadableFile, read_json

CONFIG_MAX = 4 * MiB  # a config.json is a few KiB
TOKENIZER_MAX = 256 * MiB  # a tokenizer.json of a large-vocabulary model is tens of MiB
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
        read_json(Path(folder) / "config.json", what="Hugging Face config.json", max_bytes=CONFIG_MAX,
                  root=checkpoint_root(folder))
    except UnreadableFile as e:
        return e.reason
    return None


def read_hf_config(folder: Path) -> dict[str, Any] | None:
    """The folder's config.json as a dict, or None when it is missing, unreadable or not a JSON object
    (`config_problem` says why)."""
    try:
        return read_json(Path(folder) / "config.json", what="Hugging Face config.json", max_bytes=CONFIG_MAX,
                         root=checkpoint_root(folder))
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


def weights_findings(folder: Path, value, want: Layout, field: tuple = ("speculation", "checkpoint")) \
        -> Iterator[Finding]:
    """The folder's weights must be there and be `want`'s layout (specbuild.checkpoint_tensors): an EAGLE-1
    head given to method eagle3, a Medusa folder given as the target, a draft with fewer decoder layers than its
    config.json are refused here rather than when a server loads them (where transformers would initialise the
    missing tensors at random). Weights whose names cannot be read without loading them pass."""
    folder = Path(folder)
    where = ".".join(map(str, field))
    if not has_weights(folder):
        yield Finding(field, f"{value} has no weights ({', '.join(WEIGHT_PATTERNS[:2])} ...) — point {where} at "
                      f"the complete folder of {want.label}")
        return
    root = checkpoint_root(folder)
    if shards := checkpoint_tensors.missing_shards(folder, root):
        yield Finding(field, f"{value}: its shard index names {len(shards)} weight file(s) that are not there "
                      f"({', '.join(shards[:3])}{', ...' if len(shards) > 3 else ''}) — the download is incomplete; "
                      "fetch the missing files")
        return
    # the weights file the layout's loaders read first, where the folder has it; else every weights file in it
    files = want.files if any((folder / f).is_file() for f in want.files) else ()
    for name, have, promised in checkpoint_tensors.truncated(folder, files, root=root)[:1]:
        yield Finding(field, f"{value}/{name} is truncated ({have:,} of the {promised:,} bytes its header lists) — "
                      "the download was interrupted; fetch the file again")
        return
    names = checkpoint_tensors.tensor_names(folder, files, root=root)
    if names is None:
        return
    found = checkpoint_tensors.layout(names)
    if found != want:
        shown = ", ".join(checkpoint_tensors.evidence(names, found) if found else sorted(names)[:3])
        what = f"{found.label} ({shown}, ...), which {found.read_by} takes" if found else \
            f"tensors of no layout specbuild reads ({shown}, ...)"
        yield Finding(field, f"{value} holds {what}, not {want.label} — point {where} at a folder of {want.label}")
        return
    if want in (CAUSAL_LM, EAGLE1):  # both number their decoder layers as config.json counts them
        cfg = read_hf_config(folder) or {}
        layers = next((cfg[k] for k in ("num_hidden_layers", "n_layer", "num_layers") if k in cfg), None)
        if isinstance(layers, int) and not isinstance(layers, bool):
            missing = checkpoint_tensors.missing_layers(names, layers)
            if missing:
                yield Finding(field, f"{value}/config.json has {layers} decoder layers but the weights hold no "
                              f"tensors of layer{'s' if len(missing) > 1 else ''} {_ranges(missing)} — the "
                              "checkpoint is incomplete or its config.json belongs to another model")


def _ranges(numbers: list[int]) -> str:
    """[1, 2, 3, 7] -> "1-3, 7"."""
    runs: list[list[int]] = []
    for n in numbers:
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return ", ".join(f"{a}-{b}" if b > a else f"{a}" for a, b in runs)


def tokenizer_problem(folder: Path) -> str | None:
    """Why the folder's tokenizer.json cannot be used (None when it can or when there is none: a tokenizer may
    come as tokenizer.model / vocab.json instead)."""
    path = Path(folder) / "tokenizer.json"
    if not path.exists() and not path.is_symlink():
        return None
    try:
        data = read_json(path, what="tokenizer.json", max_bytes=TOKENIZER_MAX, root=checkpoint_root(folder))
    except UnreadableFile as e:
        return f"tokenizer.json {e.reason}"
    if not isinstance(data.get("model"), dict):
        return "tokenizer.json has no \"model\" object — it is not a Hugging Face tokenizers file"
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
        data = read_json(Path(folder) / "tokenizer.json", what="tokenizer.json", max_bytes=TOKENIZER_MAX,
                         root=checkpoint_root(folder))
    except UnreadableFile:
        return None
    model = data.get("model")
    return data, model.get("vocab") if isinstance(model, dict) else None


def tokenizer_size(folder: Path) -> int | None:
    """1 + the largest id of the folder's tokenizer.json vocabulary, or None when there is none to read (a
    tokenizer.model / vocab.json tokenizer). Added tokens are not counted: checkpoints often carry a special token
    added after training (a pad id equal to vocab_size) that ordinary text never produces."""
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
    added = sorted((str(t.get("id")), str(t.get("content"))) for t in added_tokens if isinstance(t, dict)) \
        if isinstance(added_tokens, list) else []
    if isinstance(vocab, dict):
        vocab = sorted(vocab.items())
    return (json.dumps(vocab), tuple(added))


def same_tokenizer(a: Path, b: Path) -> bool | None:
    """True/False when both folders hold a tokenizer.json to compare; None when that cannot be told."""
    va, vb = _vocab(Path(a)), _vocab(Path(b))
    if va is None or vb is None:
        return None
    return va == vb
