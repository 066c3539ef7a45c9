"""What a checkpoint folder holds, told from its tensor names without loading a weight.

`tensor_names(folder)` reads the names from, in this order: the shard index (`*.safetensors.index.json`,
`*.bin.index.json`: the keys of its `weight_map`), the safetensors headers (an 8-byte little-endian length, then
a JSON object of tensor name -> dtype, shape, offsets: huggingface/safetensors `docs/source/metadata_parsing.mdx`),
or a PyTorch zip file's `data.pkl` (torch.save's format: its pickle, read without torch and without building a
tensor). It returns None when none of these can be read (an empty placeholder file, a legacy pickle):
callers then say nothing, and loading the checkpoint decides.

`layout(names)` says which of the on-disk layouts specbuild reads the names are, recognised by the tensors each
upstream layout has and the others lack.
"""

from __future__ import annotations

import collections
import functools
import io
import json
import pickle
import re
import stat
import struct
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from specbuild.files.safe_files import MiB, UnreadableFile, check_inside, read_json, read_start

INDEX_MAX = 64 * MiB  # a shard index names every tensor once: a few MiB for the largest models
HEADER_MAX = 100 * MiB  # the safetensors library refuses larger headers (MAX_HEADER_SIZE)
PICKLE_MAX = 64 * MiB  # a state dict's data.pkl holds names, shapes and storage ids: well under a MiB per 1000
LAYER_INDEX = re.compile(r"(?:^|\.)(?:layers|h|blocks|layer)\.(\d+)\.")


@dataclass(frozen=True)
class WeightLayout:
    label: str  # "an EAGLE-1 head": how a message names it
    read_by: str  # which recipe field or method takes a folder of this layout
    files: tuple[str, ...] = ()  # the weights files its loaders read, in their order ((): any in the folder)


CAUSAL_LM = WeightLayout("a causal language model", "model.checkpoint (or a draft_target draft)")
# TensorRT-LLM's load_medusa_hf tries the .pt first (examples/medusa/convert_checkpoint.py)
MEDUSA = WeightLayout("Medusa heads", "method: medusa", ("medusa_lm_head.pt", "medusa_lm_head.safetensors"))
# TensorRT-LLM's examples/eagle/convert_checkpoint.py loads the folder with LlamaForCausalLM.from_pretrained
EAGLE1 = WeightLayout("an EAGLE-1 head", "method: eagle", ("pytorch_model.bin", "model.safetensors"))
# model.safetensors, or EAGLE's DeepSpeed `save_16bit_model` output
EAGLE3 = WeightLayout("an EAGLE-3 head", "method: eagle3", ("model.safetensors", "pytorch_model.bin"))

_MEDUSA_TENSOR = re.compile(r"^\d+\.\d+\.(?:linear\.)?(?:weight|bias)$")  # FasterDecoding/Medusa medusa_lm_head
_EMBEDDINGS = ("embed_tokens.weight", "wte.weight", "word_embeddings.weight", "embed_in.weight")


def layout(names: Iterable[str]) -> WeightLayout | None:
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


def evidence(names: Iterable[str], found: WeightLayout) -> list[str]:
    """A few of the tensor names that made `layout` say `found` (for a message)."""
    names = sorted(names)
    marks = {
        EAGLE3: ("midlayer.", "d2t", "t2d", "layers.0.hidden_norm"),
        EAGLE1: ("fc.weight", "layers.0."),
        MEDUSA: ("0.",),
        CAUSAL_LM: ("lm_head.", "model.embed_tokens.", "transformer.wte."),
    }[found]
    picked = [n for n in names if n.startswith(marks)]
    return (picked or names)[:3]


def missing_layers(names: Iterable[str], num_layers: int) -> list[int]:
    """Decoder layers 0..num_layers-1 with no tensor among `names` (extra layers, such as DeepSeek's MTP
    layers after the last decoder layer, are not counted). [] when the names show no layer numbers at all."""
    found = {int(m.group(1)) for n in names if (m := LAYER_INDEX.search(n))}
    if not found:
        return []
    return [i for i in range(num_layers) if i not in found]


def medusa_heads(names: Iterable[str]) -> int:
    """How many heads Medusa tensor names hold: heads 0..K-1, numbered by their names' first part (the weights,
    not config.json, count them: FasterDecoding/medusa-vicuna-7b-v1.3 says medusa_num_heads 2 and holds 5,
    FasterDecoding/Medusa medusa/model/medusa_model.py)."""
    heads = {int(first) for n in names if (first := n.split(".", 1)[0]).isdigit()}
    count = 0
    while count in heads:
        count += 1
    return count


def preferred_files(folder: Path, wanted: WeightLayout) -> tuple[str, ...]:
    """The weights files to read for a folder that should be `wanted`: the layout's own, where the folder has one
    of them (what its loaders read first), else () for every weights file in the folder (a sharded head, another
    runtime's file name)."""
    return wanted.files if any((Path(folder) / f).is_file() for f in wanted.files) else ()


def _weight_maps(folder: Path, root: Path):
    """The `weight_map` of each readable shard index in the folder (name -> shard file)."""
    for index in sorted(Path(folder).glob("*.index.json")):
        if not index.name.endswith((".safetensors.index.json", ".bin.index.json")) or not index.is_file():
            continue
        try:
            weight_map = read_json(index, what="shard index", max_bytes=INDEX_MAX, root=root).get("weight_map")
        except UnreadableFile:
            continue
        if isinstance(weight_map, dict):
            yield weight_map


def missing_shards(folder: Path, root: Path | None = None) -> list[str]:
    """Weight files a shard index of the folder names that are not in it (an interrupted download)."""
    folder = Path(folder)
    return sorted(
        {
            f
            for weight_map in _weight_maps(folder, root or folder)
            for f in weight_map.values()
            if isinstance(f, str) and not (folder / f).is_file()
        }
    )


def tensor_names(folder: Path, files: tuple[str, ...] = (), root: Path | None = None) -> frozenset[str] | None:
    """Every tensor name the folder's weights hold (with `files`: the first of those files present), or None
    when they cannot be read without loading them. Files whose real location is outside `root` (default: the
    folder) are not read."""
    shapes = tensor_shapes(folder, files, root)
    return None if shapes is None else frozenset(shapes)


def tensor_shapes(
    folder: Path, files: tuple[str, ...] = (), root: Path | None = None
) -> dict[str, tuple[int, ...] | None] | None:
    """`tensor_names`, each with its shape (None where only a shard index was read)."""
    folder = Path(folder)
    root = Path(root) if root is not None else folder
    if files:
        present = [folder / f for f in files if (folder / f).is_file()]
        if not present:
            return None
        path = present[0]
        return (_safetensors_shapes(path, root) if path.suffix == ".safetensors" else _torch_shapes(path, root)) or None
    for weight_map in _weight_maps(folder, root):
        if weight_map:
            return dict.fromkeys(weight_map)
    try:
        entries = sorted(p for p in folder.iterdir() if p.is_file())
    except OSError:
        return None
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
        header = _safetensors_header(path, root)
        if header is None:
            continue
        length, table = header
        ends = [
            v["data_offsets"][1]
            for k, v in table.items()
            if k != "__metadata__"
            and isinstance(v, dict)
            and isinstance(v.get("data_offsets"), list)
            and len(v["data_offsets"]) == 2
            and isinstance(v["data_offsets"][1], int)
        ]
        want = 8 + length + max(ends, default=0)
        have = path.stat().st_size
        if have < want:
            short.append((path.name, have, want))
    return short


def _safetensors_header(path: Path, root: Path) -> tuple[int, dict] | None:
    """(header length, header object) of a safetensors file, or None when it cannot be read. One `check` asks for
    the same headers several times (layout, truncation, shapes): read once per file version."""
    try:
        st = path.stat()
    except OSError:
        return None
    return _read_safetensors_header(str(path), str(root), st.st_ino, st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=64)
def _read_safetensors_header(path: str, root: str, inode: int, size: int, mtime_ns: int) -> tuple[int, dict] | None:
    try:
        start = read_start(path, 8, what="safetensors file", root=Path(root))
        if len(start) < 8:
            return None
        (length,) = struct.unpack("<Q", start)
        if length > HEADER_MAX:
            return None
        header = read_start(path, 8 + length, what="safetensors file", root=Path(root))[8:]
    except UnreadableFile:
        return None
    try:
        table = json.loads(header)
    except (ValueError, RecursionError):
        return None
    return (length, table) if isinstance(table, dict) else None


def _safetensors_shapes(path: Path, root: Path) -> dict[str, tuple[int, ...] | None] | None:
    header = _safetensors_header(path, root)
    if header is None:
        return None
    return {
        k: _shape(v.get("shape") if isinstance(v, dict) else None) for k, v in header[1].items() if k != "__metadata__"
    }


def _shape(value) -> tuple[int, ...] | None:
    ok = isinstance(value, (list, tuple)) and all(isinstance(n, int) and not isinstance(n, bool) for n in value)
    return tuple(value) if ok else None


def _torch_shapes(path: Path, root: Path) -> dict[str, tuple[int, ...] | None] | None:
    """Names and shapes from a PyTorch zip file's `data.pkl` (torch.save's format since 1.6), without torch: the
    pickle is read by `_ShapesUnpickler`, which builds no tensor and knows only the globals a state dict uses."""
    try:
        check_inside(path, root, "weights file")
        if not stat.S_ISREG(path.stat().st_mode) or not zipfile.is_zipfile(path):
            return None  # a FIFO (never opened), an empty placeholder, a legacy pickle
        with zipfile.ZipFile(path) as archive:
            pickles = [i for i in archive.infolist() if i.filename.endswith("/data.pkl") or i.filename == "data.pkl"]
            if len(pickles) != 1 or pickles[0].file_size > PICKLE_MAX:
                return None
            state = _ShapesUnpickler(io.BytesIO(archive.read(pickles[0]))).load()
    except (
        UnreadableFile,
        OSError,
        zipfile.BadZipFile,
        pickle.UnpicklingError,
        EOFError,
        ValueError,
        TypeError,
        AttributeError,
        IndexError,
        KeyError,
        RecursionError,
    ):
        return None
    if not isinstance(state, dict):
        return None
    return {k: v if isinstance(v, tuple) else None for k, v in state.items() if isinstance(k, str)}


def _tensor_shape(storage, offset, size, *rest):
    """Stands for torch._utils._rebuild_tensor_v2 (storage, storage_offset, size, stride, ...): the shape."""
    return tuple(int(n) for n in size)


def _parameter(data, *rest):
    """Stands for torch._utils._rebuild_parameter (data, requires_grad, backward_hooks): the tensor's shape."""
    return data


def _from_type(func, new_type, args, state):
    """Stands for torch._tensor._rebuild_from_type_v2 (a tensor subclass such as nn.Parameter)."""
    return func(*args)


class _ShapesUnpickler(pickle.Unpickler):
    """Unpickles a state dict's `data.pkl` into {name: shape}: tensors become their shapes, storages stay unread
    (persistent ids), and any global other than the few a state dict needs refuses the file (as torch's
    weights_only loader would), so nothing in the file can run code."""

    _GLOBALS = {
        ("collections", "OrderedDict"): collections.OrderedDict,
        ("torch._utils", "_rebuild_tensor_v2"): _tensor_shape,
        ("torch._utils", "_rebuild_parameter"): _parameter,
        ("torch._tensor", "_rebuild_from_type_v2"): _from_type,
        ("torch.nn.parameter", "Parameter"): None,
    }

    def find_class(self, module, name):
        if (module, name) in self._GLOBALS:
            return self._GLOBALS[(module, name)]
        if module == "torch" and name.endswith("Storage"):  # torch.FloatStorage, ...: only named in storage ids
            return None
        raise pickle.UnpicklingError(f"{module}.{name} is not part of a state dict")

    def persistent_load(self, pid):
        return None  # a storage record ("storage", type, key, location, numel): its bytes are not read
