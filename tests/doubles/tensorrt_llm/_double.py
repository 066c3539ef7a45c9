"""Shared machinery of the double: fault injection, call log, HF config reading, safetensors writing."""

from __future__ import annotations

import json
import os
import signal
import struct
import sys
import time
from pathlib import Path


def fault(stage: str) -> str | None:
    """The injected fault for this stage ('convert' or 'build'), if any."""
    spec = os.environ.get("SPECBUILD_DOUBLE_FAULT", "")
    for item in spec.split(","):
        if item.startswith(stage + ":"):
            return item.split(":", 1)[1]
    return None


def maybe_crash(stage: str) -> None:
    kind = fault(stage)
    if kind == "oom":
        raise RuntimeError(
            "CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.11 GiB total capacity) "
            "[specbuild test double: injected fault]"
        )
    if kind == "segv":
        sys.stderr.write("[specbuild test double] injected segmentation fault\n")
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGSEGV)
        time.sleep(5)


def write_pid() -> None:
    path = os.environ.get("SPECBUILD_DOUBLE_PID_FILE")
    if path:
        Path(path).write_text(str(os.getpid()))


def log_call(name: str, args: dict) -> None:
    path = os.environ.get("SPECBUILD_DOUBLE_CALL_LOG")
    if not path:
        return
    shown = {
        k: {
            "type": type(v).__name__,
            "value": v
            if isinstance(v, (str, int, float, bool, type(None)))
            else (vars(v) if hasattr(v, "__dict__") and not isinstance(v, type) else str(v)),
        }
        for k, v in args.items()
    }
    with open(path, "a") as f:
        f.write(json.dumps({"call": name, "args": shown}, default=str) + "\n")


def read_hf_config(model_dir) -> dict:
    """What transformers.AutoConfig.from_pretrained would read (the double reads the JSON directly)."""
    path = Path(str(model_dir)) / "config.json"
    if not path.is_file():
        raise OSError(f"{model_dir} does not appear to have a file named config.json")
    return json.loads(path.read_text())


def infer_dtype(dtype: str, hf_torch_dtype: str | None) -> str:
    # convert_checkpoint.py --dtype auto: "inferred from the source model; if the source dtype is float32, it is
    # converted to float16" (examples/models/core/llama/convert_checkpoint.py).
    if dtype == "auto":
        dtype = (hf_torch_dtype or "float16").replace("torch.", "")
        if dtype == "float32":
            dtype = "float16"
    if dtype not in ("float16", "bfloat16", "float32"):
        raise ValueError(f"Unsupported dtype {dtype}")
    return dtype


SAFETENSORS_DTYPE = {"float16": ("F16", 2), "bfloat16": ("BF16", 2), "float32": ("F32", 4)}


def write_safetensors(path: Path, tensors: dict[str, tuple[str, list[int]]]) -> None:
    """A valid safetensors file of zero-filled tensors: {name: (dtype, shape)}. The data region is a hole
    (the file is extended with truncate), so a rank of an 8B model costs no disk."""
    header, offset, sizes = {}, 0, []
    for name, (dtype, shape) in tensors.items():
        code, width = SAFETENSORS_DTYPE[dtype]
        n = width
        for d in shape:
            n *= d
        header[name] = {"dtype": code, "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
        sizes.append(n)
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        f.truncate(8 + len(raw) + offset)


def weight_names(folder: Path, files: tuple[str, ...]) -> set[str] | None:
    """The tensor names of the first of `files` in `folder` (what torch.load / safetensors would give the
    converter's loader), read from the safetensors header or the PyTorch zip's data.pkl without loading data."""
    for name in files:
        path = Path(folder) / name
        if not path.is_file():
            continue
        if path.suffix == ".safetensors":  # safetensors' own reader refuses a file without a whole header
            with open(path, "rb") as f:
                start = f.read(8)
                if len(start) < 8:
                    raise ValueError(f"{path}: HeaderTooSmall [specbuild test double]")
                (length,) = struct.unpack("<Q", start)
                return {k for k in json.loads(f.read(length)) if k != "__metadata__"}
        import pickle
        import zipfile

        class Names(pickle.Unpickler):
            def find_class(self, module, name):  # the state dict's mapping; tensors and storages stay unbuilt
                import collections

                return (
                    collections.OrderedDict
                    if (module, name) == ("collections", "OrderedDict")
                    else (lambda *a, **k: None)
                )

            def persistent_load(self, pid):
                return None

        with zipfile.ZipFile(path) as archive:
            pkl = next(n for n in archive.namelist() if n.endswith("data.pkl"))
            return set(Names(__import__("io").BytesIO(archive.read(pkl))).load())
    return None
