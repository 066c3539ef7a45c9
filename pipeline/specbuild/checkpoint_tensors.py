"""What a checkpoint folder holds, told from its tensor names without loading a weight.

`tensor_names(folder)` reads the names from, in this order: the shard index (`*.safetensors.index.json`,
`*.bin.index.json`: the keys of its `weight_map`), the safetensors headers (an 8-byte little-endian length, then
a JSON object of tensor name -> dtype, shape, offsets: huggingface/safetensors `docs/source/metadata_parsing.mdx`),
or a PyTorch zip file opened by `torch.load(mmap=True, weights_only=True)` (the tensors stay unread on disk).
It returns None when none of these can be read (an empty placeholder file, a legacy pickle, no torch installed):
callers then say nothing, and loading the checkpoint decides.

`layout(names)` says which of the on-disk layouts specbuild reads the names are, recognised by the tensors each
upstream layout has and the others lack.
"""

from __future__ import annotations

import json
import re
import stat
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from specbuild.safe_files import MiB, UnreadableFile, check_inside, read_json, read_start

INDEX_MAX = 64 * MiB  # a shard index names every tensor once: a few MiB for the largest models
HEADER_MAX = 100 * MiB  # the safetensors library refuses larger headers (MAX_HEADER_SIZE)
LAYER_INDEX = re.compile(r"(?:^|\.)(?:layers|h|blocks|layer)\.(\d+)\.")


@dataclass(frozen=True)
class Layout:
    label: str  # "an EAGLE-1 head": how a message names it
    read_by: str  # which recipe field or method takes a folder of this layout
    files: tuple[str, ...] = ()  # the weights files its loaders read, in their order ((): any in the folder)


CAUSAL_LM = Layout("a causal language model", "model.checkpoint (or a draft_target draft)")
# TensorRT-LLM's load_medusa_hf tries the .pt first (examples/medusa/convert_checkpoint.py)
MEDUSA = Layout("Medusa heads", "method: medusa", ("medusa_lm_head.pt", "medusa_lm_head.safetensors"))
# TensorRT-LLM's examples/eagle/convert_checkpoint.py loads the folder with LlamaForCausalLM.from_pretrained
EAGLE1 = Layout("an EAGLE-1 head", "method: eagle", ("pytorch_model.bin", "model.safetensors"))
# model.safetensors, or EAGLE's DeepSpeed `save_16bit_model` output
EAGLE3 = Layout("an EAGLE-3 head", "method: eagle3", ("model.safetensors", "pytorch_model.bin"))

_MEDUSA_TENSOR = re.compile(r"^\d+\.\d+\.(?:linear\.)?(?:weight|bias)$")  # FasterDecoding/Medusa medusa_lm_head
_EMBEDDINGS = ("embed_tokens.weight", "wte.weight", "word_embeddings.weight", "embed_in.weight")


def layout(names: Iterable[str]) -> Layout | None:
    """The layout these tensor names are (None: none that specbuild knows).

    EAGLE-3 (SafeAILab/EAGLE `eagle3` checkpoints, TensorRT-LLM `Eagle3ForCausalLM`): `midlayer.*`, the
    vocabulary maps `d2t` / `t2d`, or an unprefixed layer's `hidden_norm` (the norm of the fused target
    features; exports that name the layer `layers.0` keep it). Medusa: only `<head>.<layer>.linear.*` and `<head>.<n>.weight`.
    EAGLE-1 (SafeAILab/EAGLE checkpoints, TensorRT-LLM `--eagle_model_dir`): `fc.weight` beside unprefixed
    `layers.<i>.*`. A causal LM: an embedding or `lm_head.weight`, none of the above."""
    names = set(names)
    if not names:
        return None
    numbered_eagle3 = (n.startswith("layers.") and n.endswith(".hidden_norm.weight") for n in names)
    if any(n.startswith("midlayer.") for n in names) or {"d2t", "t2d"} & names or any(numbered_eagle3):
        return EAGLE3
    if all(_MEDUSA_TENSOR.match(n) for n in names):
        return MEDUSA
    if "fc.weight" in names and any(n.startswith("layers.") for n in names):
        return EAGLE1
    if "lm_head.weight" in names or any(n.endswith(_EMBEDDINGS) for n in names):
        return CAUSAL_LM
    return None


def evidence(names: Iterable[str], found: Layout) -> list[str]:
    """A few of the tensor names that made `layout` say `found` (for a message)."""
    names = sorted(names)
    marks = {EAGLE3: ("midlayer.", "d2t", "t2d", "layers.0.hidden_norm"), EAGLE1: ("fc.weight", "layers.0."), MEDUSA: ("0.",),
             CAUSAL_LM: ("lm_head.", "model.embed_tokens.", "transformer.wte.")}[found]
    picked = [n for n in names if n.startswith(marks)]
    return (picked or names)[:3]


def missing_layers(names: Iterable[str], num_layers: int) -> list[int]:
    """Decoder layers 0..num_layers-1 with no tensor among `names` (extra layers, such as DeepSeek's MTP
    layers after the last decoder layer, are not counted). [] when the names show no layer numbers at all."""
    found = {int(m.group(1)) for n in names if (m := LAYER_INDEX.search(n))}
    if not found:
        return []
    return [i for i in range(num_layers) if i not in found]


def has_mtp_layers(names: Iterable[str], num_layers: int) -> bool | None:
    """Whether the names hold multi-token-prediction layers: decoder layers numbered from `num_layers` on
    (DeepSeek-V3's `model.layers.61.*`, GLM-4.5's), or tensors named `mtp` / `nextn` (Qwen3-Next's `mtp.*`).
    None when the names show no layer numbers (nothing to tell by)."""
    names = list(names)
    if any("mtp" in n or "nextn" in n for n in names):
        return True
    found = {int(m.group(1)) for n in names if (m := LAYER_INDEX.search(n))}
    if not found:
        return None
    return max(found) >= num_layers


def missing_shards(folder: Path, root: Path | None = None) -> list[str]:
    """Weight files a shard index of the folder names that are not in it (an interrupted download)."""
    folder = Path(folder)
    missing: set[str] = set()
    for index in sorted(folder.glob("*.index.json")):
        if not index.name.endswith((".safetensors.index.json", ".bin.index.json")):
            continue
        try:
            weight_map = read_json(index, what="shard index", max_bytes=INDEX_MAX, root=root or folder).get("weight_map")
        except UnreadableFile:
            continue
        if isinstance(weight_map, dict):
            missing |= {f for f in weight_map.values() if isinstance(f, str) and not (folder / f).is_file()}
    return sorted(missing)


def tensor_names(folder: Path, files: tuple[str, ...] = (), root: Path | None = None) -> frozenset[str] | None:
    """Every tensor name the folder's weights hold (with `files`: the first of those files present), or None
    when they cannot be read without loading them. Files whose real location is outside `root` (default: the
    folder) are not read."""
    shapes = tensor_shapes(folder, files, root)
    return None if shapes is None else frozenset(shapes)


def tensor_shapes(folder: Path, files: tuple[str, ...] = (), root: Path | None = None) \
        -> dict[str, tuple[int, ...] | None] | None:
    """`tensor_names`, each with its shape (None where only a shard index was read)."""
    folder = Path(folder)
    root = Path(root) if root is not None else folder
    if files:
        present = [folder / f for f in files if (folder / f).is_file()]
        if not present:
            return None
        path = present[0]
        return (_safetensors_shapes(path, root) if path.suffix == ".safetensors" else _torch_shapes(path, root)) or None
    try:
        entries = sorted(p for p in folder.iterdir() if p.is_file())
    except OSError:
        return None
    for index in (p for p in entries if p.name.endswith((".safetensors.index.json", ".bin.index.json"))):
        try:
            weight_map = read_json(index, what="shard index", max_bytes=INDEX_MAX, root=root).get("weight_map")
        except UnreadableFile:
            continue
        if isinstance(weight_map, dict) and weight_map:
            return dict.fromkeys(weight_map)
    shapes: dict[str, tuple[int, ...] | None] = {}
    for path in (p for p in entries if p.suffix == ".safetensors"):
        header = _safetensors_shapes(path, root)
        if header is None:
            return None
        shapes.update(header)
    if shapes:
        return shapes
    for path in (p for p in entries if p.suffix in (".bin", ".pt", ".pth")):
        found = _torch_shapes(path, root)
        if found is None:
            return None
        shapes.update(found)
    return shapes or None


def truncated(folder: Path, files: tuple[str, ...] = (), root: Path | None = None) -> list[tuple[str, int, int]]:
    """(name, bytes present, bytes its header promises) of each safetensors file of the folder (with `files`: of
    those) that is shorter than its header says: an interrupted download. The header's last data offset marks
    the end (8 + header length + the largest `data_offsets` end)."""
    folder = Path(folder)
    root = Path(root) if root is not None else folder
    paths = [folder / f for f in files] if files else sorted(folder.glob("*.safetensors"))
    short = []
    for path in (p for p in paths if p.suffix == ".safetensors" and p.is_file()):
        table = _safetensors_header(path, root)
        if table is None:
            continue
        ends = [v["data_offsets"][1] for k, v in table.items() if k != "__metadata__" and isinstance(v, dict)
                and isinstance(v.get("data_offsets"), list) and len(v["data_offsets"]) == 2
                and isinstance(v["data_offsets"][1], int)]
        want = 8 + table["__header_length__"] + max(ends, default=0)
        have = path.stat().st_size
        if have < want:
            short.append((path.name, have, want))
    return short


def _safetensors_header(path: Path, root: Path) -> dict | None:
    """The header object of a safetensors file (plus `__header_length__`), or None when it cannot be read."""
    try:
        start = read_start(path, 8, what="safetensors file", root=root)
        if len(start) < 8:
            return None
        (length,) = struct.unpack("<Q", start)
        if length > HEADER_MAX:
            return None
        header = read_start(path, 8 + length, what="safetensors file", root=root)[8:]
    except UnreadableFile:
        return None
    try:
        table = json.loads(header)
    except (ValueError, RecursionError):
        return None
    if not isinstance(table, dict):
        return None
    table["__header_length__"] = length
    return table


def _safetensors_shapes(path: Path, root: Path) -> dict[str, tuple[int, ...] | None] | None:
    table = _safetensors_header(path, root)
    if table is None:
        return None
    return {k: _shape(v.get("shape") if isinstance(v, dict) else None) for k, v in table.items()
            if k not in ("__metadata__", "__header_length__")}


def _shape(value) -> tuple[int, ...] | None:
    ok = isinstance(value, (list, tuple)) and all(isinstance(n, int) and not isinstance(n, bool) for n in value)
    return tuple(value) if ok else None


def _torch_shapes(path: Path, root: Path) -> dict[str, tuple[int, ...] | None] | None:
    try:
        check_inside(path, root, "weights file")
        if not stat.S_ISREG(path.stat().st_mode) or path.stat().st_size == 0:
            return None  # a FIFO would block torch.load; an empty file is a placeholder
        import torch
    except (UnreadableFile, OSError, ImportError):
        return None
    try:
        state = torch.load(path, map_location="cpu", mmap=True, weights_only=True)
    except Exception:  # noqa: BLE001 - a legacy or damaged pickle: loading it later says what is wrong
        return None
    if not isinstance(state, dict):
        return None
    return {k: _shape(list(v.shape)) if hasattr(v, "shape") else None for k, v in state.items() if isinstance(k, str)}
