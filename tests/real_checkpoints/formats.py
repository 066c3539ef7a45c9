"""Writers of the on-disk formats real checkpoints come in, with their data regions left sparse (holes).

- safetensors (huggingface/safetensors `docs/source/metadata_parsing.mdx`): an 8-byte little-endian header length,
  the JSON header {name: {dtype, shape, data_offsets}, "__metadata__": {...}} padded with spaces to 8 bytes, then
  the data; the file is extended to its full size with truncate, so it reads as zeros and takes no disk blocks.
- PyTorch zip checkpoints (torch.save since 1.6, `torch/serialization.py` `_save`): a stored (uncompressed) zip of
  `<archive>/data.pkl` (the pickled state dict, tensors as `torch._utils._rebuild_tensor_v2` over persistent
  storage records `("storage", <Storage type>, key, "cpu", numel)`), `<archive>/byteorder`, `<archive>/data/<key>`
  (one entry per storage, its bytes 64-byte aligned as PyTorchStreamWriter aligns them), `<archive>/version`.
  The storage entries are holes of their real size whose CRC-32 is written as 0: nothing in these tests reads
  their bytes (check and the doubles read data.pkl only), and torch.load would refuse them.
- shard indexes (`*.safetensors.index.json`, `pytorch_model.bin.index.json`): {"metadata": {"total_size": N},
  "weight_map": {name: file}} (transformers `modeling_utils.py` save_pretrained).
"""

from __future__ import annotations

import io
import json
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

# dtype -> (safetensors code, bytes per element, torch storage class)
DTYPES = {
    "bfloat16": ("BF16", 2, "BFloat16Storage"),
    "float16": ("F16", 2, "HalfStorage"),
    "float32": ("F32", 4, "FloatStorage"),
    "float8_e4m3fn": ("F8_E4M3", 1, "Float8_e4m3fnStorage"),
    "int64": ("I64", 8, "LongStorage"),
    "bool": ("BOOL", 1, "BoolStorage"),
}


@dataclass(frozen=True)
class Tensor:
    name: str
    dtype: str
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        n = DTYPES[self.dtype][1]
        for d in self.shape:
            n *= d
        return n


def total_bytes(tensors: list[Tensor]) -> int:
    return sum(t.nbytes for t in tensors)


def write_safetensors(path: Path, tensors: list[Tensor], metadata: dict | None = None) -> int:
    """A safetensors file with the real header and a sparse data region; returns its size."""
    header: dict = {"__metadata__": metadata or {"format": "pt"}}
    offset = 0
    for t in tensors:
        header[t.name] = {
            "dtype": DTYPES[t.dtype][0],
            "shape": list(t.shape),
            "data_offsets": [offset, offset + t.nbytes],
        }
        offset += t.nbytes
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        f.truncate(8 + len(raw) + offset)
    return 8 + len(raw) + offset


def write_index(path: Path, weight_map: dict[str, str], total_size: int) -> None:
    path.write_text(
        json.dumps({"metadata": {"total_size": total_size}, "weight_map": dict(sorted(weight_map.items()))}, indent=2)
        + "\n"
    )


# --- PyTorch zip --------------------------------------------------------------------------------------------


def write_torch_zip(path: Path, tensors: list[Tensor], archive: str | None = None) -> int:
    """A PyTorch zip checkpoint: the real entry layout and data.pkl; storage entries are sparse holes."""
    archive = archive or path.stem
    entries: list[tuple[str, bytes | int]] = [
        (f"{archive}/data.pkl", _state_pickle(tensors)),
        (f"{archive}/byteorder", b"little"),
    ]
    entries += [(f"{archive}/data/{i}", t.nbytes) for i, t in enumerate(tensors)]
    entries += [(f"{archive}/version", b"3\n"), (f"{archive}/.data/serialization_id", b"0" * 40)]
    central, offset = [], 0
    with open(path, "wb") as f:
        for name, content in entries:
            raw_name = name.encode()
            size = len(content) if isinstance(content, bytes) else content
            crc = zlib.crc32(content) if isinstance(content, bytes) else 0
            header_len = 30 + len(raw_name) + 20 + 4  # local header + zip64 extra + padding extra header
            pad = -(offset + header_len) % 64  # PyTorchStreamWriter aligns each record's data to 64 bytes
            extra = struct.pack("<HHQQ", 1, 16, size, size) + struct.pack("<HH", 0x4246, pad) + b"Z" * pad
            f.write(
                struct.pack(
                    "<IHHHHHIIIHH",
                    0x04034B50,
                    45,
                    0,
                    0,
                    0,
                    0x21,
                    crc,
                    0xFFFFFFFF,
                    0xFFFFFFFF,
                    len(raw_name),
                    len(extra),
                )
            )
            f.write(raw_name + extra)
            if isinstance(content, bytes):
                f.write(content)
            else:
                f.seek(size, 1)
            central.append((raw_name, crc, size, offset))
            offset = f.tell()
        start = offset
        for raw_name, crc, size, local in central:
            extra = struct.pack("<HHQQQ", 1, 24, size, size, local)
            f.write(
                struct.pack(
                    "<IHHHHHHIIIHHHHHII",
                    0x02014B50,
                    45,
                    45,
                    0,
                    0,
                    0,
                    0x21,
                    crc,
                    0xFFFFFFFF,
                    0xFFFFFFFF,
                    len(raw_name),
                    len(extra),
                    0,
                    0,
                    0,
                    0,
                    0xFFFFFFFF,
                )
            )
            f.write(raw_name + extra)
        end = f.tell()
        f.write(
            struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 45, 45, 0, 0, len(central), len(central), end - start, start)
        )
        f.write(struct.pack("<IIQI", 0x07064B50, 0, end, 1))
        f.write(struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0))
        f.truncate()
        return f.tell()


def _state_pickle(tensors: list[Tensor]) -> bytes:
    """data.pkl, written opcode by opcode (protocol 2, as torch.save): an OrderedDict whose values are
    _rebuild_tensor_v2(persistent storage, 0, size, stride, False, OrderedDict())."""
    out = io.BytesIO()
    w = out.write

    def string(s: str) -> None:
        raw = s.encode()
        w(b"X" + struct.pack("<I", len(raw)) + raw)  # BINUNICODE

    def integer(n: int) -> None:
        w(b"J" + struct.pack("<i", n)) if -(2**31) <= n < 2**31 else w(b"\x8a\x08" + struct.pack("<q", n))

    def tuple_of(items) -> None:
        w(b"(")  # MARK
        for item in items:
            integer(item)
        w(b"t")  # TUPLE

    w(b"\x80\x02")  # PROTO 2
    w(b"ccollections\nOrderedDict\n)R")  # GLOBAL, EMPTY_TUPLE, REDUCE
    w(b"(")  # MARK for SETITEMS
    for i, t in enumerate(tensors):
        string(t.name)
        w(b"ctorch._utils\n_rebuild_tensor_v2\n")
        w(b"(")  # MARK: the argument tuple
        w(b"(")  # MARK: the persistent id tuple
        string("storage")
        w(f"ctorch\n{DTYPES[t.dtype][2]}\n".encode())
        string(str(i))
        string("cpu")
        numel = 1
        for d in t.shape:
            numel *= d
        integer(numel)
        w(b"tQ")  # TUPLE, BINPERSID
        integer(0)
        tuple_of(t.shape)
        stride, step = [], 1
        for d in reversed(t.shape):
            stride.insert(0, step)
            step *= d
        tuple_of(stride)
        w(b"\x89")  # NEWFALSE
        w(b"ccollections\nOrderedDict\n)R")
        w(b"tR")  # TUPLE, REDUCE
    w(b"u.")  # SETITEMS, STOP
    return out.getvalue()
