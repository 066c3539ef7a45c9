"""Which float32 matmul kernel runs a weight shape fastest at each row count on this CPU: measured once, cached.

Three kernels compute y = x W^T for a float32 weight W [out, in] (lean/linear.py holds the weights and calls them):
- `column-major`: `F.linear` over W stored transposed (W^T contiguous): MKL's sgemv/sgemm on a plain [in, out];
- `row-major`: `F.linear` over W as the checkpoint stores it (MKL reads it transposed);
- `packed`: oneDNN's `_linear_pointwise` over a copy in oneDNN's blocked layout (the kernel PyTorch's inductor uses
  for frozen CPU linears), where this torch has oneDNN.
Which is fastest depends on the CPU (MKL and oneDNN pick their code by vendor and instruction set), the shape and
the number of rows a call multiplies (1 for a decode step, k + 1 to verify a chain of k drafts, more for trees and
batches). `measure_shape` times the three on random weights of the shape at each row count of ROWS, cycling copies
of the matrix so that its weights come from memory as in a forward (WORKSET_BYTES). `time_kernels` runs the
kernels in rounds, back to back and in rotating order; a kernel's time in a round is its fastest call; the result
is column-major's fastest round, and for each other kernel that times the median over rounds of its ratio to
column-major in the same round (the machine's other work loads a round's kernels alike, and a ratio cancels it
where an absolute minimum does not: on a 2-core machine at load 10 the minimum of 20 rounds still moved by 20-30%
between runs, the ratios by about 10%). The first round sizes how many more fit CELL_BUDGET_S
(MIN_ROUNDS..ROUNDS). `choose` keeps the fixed rule's kernel unless
another is faster by more than MARGIN and gives each shape one dense layout (plus, where it pays, a packed copy):
no matrix is held three times.

Measured times are cached per CPU in `<specbuild cache dir>/matmul/<cpu>-<digest>.json` (the cache dir:
$SPECBUILD_CACHE_DIR, else $XDG_CACHE_HOME/specbuild, else ~/.cache/specbuild; next to the build cache's
`steps/`). The digest covers the CPU's model name and flags, the torch version and build (MKL, oneDNN), the thread
count, the environment variables that steer MKL's and oneDNN's code paths, and ROWS: another CPU, torch or thread
count reads another file. The file is rewritten whole (specbuild.files.atomic.write_file) under an exclusive lock
(two model loads at once measure a shape once, the second reads it); an unreadable, malformed or foreign file, or
an entry without every row count, is measured again; a cache that cannot be written leaves the measurement in
this process only. Nothing here is fatal.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import logging
import math
import os
import re
import statistics
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Mapping

import torch
import torch.nn.functional as F

from specbuild.facts import cpu
from specbuild.files.atomic import write_file
from specbuild.serve.binary import cache_dir

COLUMN_MAJOR, ROW_MAJOR, PACKED = "column-major", "row-major", "packed"
DENSE = (COLUMN_MAJOR, ROW_MAJOR)
# The row counts measured; a call of n rows takes the choice of the largest one <= n (1: a decode step; 2-3: short
# verifications and lookahead; 6: verifying a chain of 5; 16, 32: trees and batches, and beyond: prefill)
ROWS = (1, 2, 3, 4, 6, 8, 16, 32)
MARGIN = 0.10  # another kernel replaces the fixed rule's only where its time is below (1 - MARGIN) of it
ROUNDS, MIN_ROUNDS = 9, 3
CELL_BUDGET_S = 0.05  # per (shape, row count): a base-zoo lm_head 4096 x 384 (3 copies) gets 5-9 rounds
WORKSET_BYTES = 16 << 20  # copies of a matrix cycled per sample: past a core's L2, as a forward's weights are
MAX_COPIES = 8
FORMAT = 1
# Variables that change the code MKL or oneDNN run (and so the times): part of the cache key
KERNEL_ENV = ("MKL_ENABLE_INSTRUCTIONS", "MKL_CBWR", "MKL_DEBUG_CPU_TYPE", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA")

Shape = tuple[int, int]  # [out, in]
Times = dict[int, dict[str, float]]  # row count -> kernel -> microseconds per call
Measure = Callable[[Shape], Times]

log = logging.getLogger(__name__)


def band(rows: int) -> int:
    """The measured row count whose choice a call of `rows` rows takes: the largest in ROWS <= rows."""
    return max((r for r in ROWS if r <= rows), default=ROWS[0])


@dataclass(frozen=True)
class KernelPlan:
    """How one weight shape is multiplied: stored in one dense layout, plus a packed copy used for the row-count
    bands in `packed_rows` (members of ROWS)."""

    dense: str
    packed_rows: frozenset[int] = field(default_factory=frozenset)

    def kernel(self, rows: int) -> str:
        return PACKED if band(rows) in self.packed_rows else self.dense

    def describe(self) -> str:
        parts = [
            f"{r}+ rows {self.kernel(r)}"
            for i, r in enumerate(ROWS)
            if i == 0 or self.kernel(r) != self.kernel(ROWS[i - 1])
        ]
        return ", ".join(parts)


def choose(times: Times, default: KernelPlan, margin: float = MARGIN) -> KernelPlan:
    """The plan for a shape from its measured times. At each row count (in increasing order) the default plan's
    kernel, unless another is faster by more than `margin`; then the kernel of the row count below, unless another
    is faster by more than `margin` (fewer bands where a kernel keeps winning); else the fastest. One dense layout
    per shape: the single-row call's (a decode step: the call every method makes most, and the autoregressive
    baseline's only one); where the packed copy wins that too, the dense layout whose row counts lose the least time
    against their winners (a tie keeps the default's). The packed copy serves the row counts where it is the faster
    of it and that layout."""
    winners: dict[int, str] = {}
    previous = None
    for rows in ROWS:
        t = times[rows]
        best = min(t, key=t.__getitem__)
        kept = [k for k in (default.kernel(rows), default.dense, previous) if k in t]
        winners[rows] = next((k for k in kept if (1 - margin) * t[k] <= t[best]), best)
        previous = winners[rows]

    def kernels_with(dense: str) -> dict[int, str]:
        out = {}
        for rows, won in winners.items():
            t = times[rows]
            if won in (dense, PACKED):
                out[rows] = won
            else:
                out[rows] = PACKED if PACKED in t and t[PACKED] < t[dense] else dense
        return out

    def loss(dense: str) -> float:
        return sum(times[r][k] / times[r][winners[r]] for r, k in kernels_with(dense).items())

    dense = winners[ROWS[0]]
    if dense not in DENSE:
        other = ROW_MAJOR if default.dense == COLUMN_MAJOR else COLUMN_MAJOR
        dense = other if loss(other) < loss(default.dense) else default.dense
    return KernelPlan(dense, frozenset(r for r, k in kernels_with(dense).items() if k == PACKED))


def time_kernels(
    kernels: Mapping[str, Callable[[int], object]],
    copies: int,
    *,
    rounds: int = ROUNDS,
    min_rounds: int = MIN_ROUNDS,
    budget_s: float = CELL_BUDGET_S,
    clock: Callable[[], float] = time.perf_counter,
) -> dict[str, float]:
    """Microseconds per call of each kernel (`kernels[name](i)` runs it on copy i). After one untimed pass (oneDNN
    builds its primitives on a first call), rounds in which every kernel runs over all copies, the order rotating
    from round to round, each call timed alone; the first round's length sets how many rounds fit `budget_s`
    (min_rounds..rounds). A kernel's time in a round is its fastest call there (a short call is seldom cut by another
    process's time slice); the first kernel's result is its fastest round, every other kernel's that times the
    median over rounds of its ratio to the first kernel in the same round: the kernels of a round run within a few
    milliseconds of each other, under the same load from the machine's other work, which a ratio cancels."""
    names = list(kernels)
    for name in names:
        for i in range(copies):
            kernels[name](i)
    per_round: dict[str, list[float]] = {name: [] for name in names}
    planned = rounds
    round_ = 0
    while round_ < planned:
        began = clock()
        shift = round_ % len(names)
        for name in names[shift:] + names[:shift]:
            run, fastest = kernels[name], math.inf
            for i in range(copies):
                start = clock()
                run(i)
                fastest = min(fastest, clock() - start)
            per_round[name].append(max(fastest, 1e-12))
        if round_ == 0:
            planned = max(min_rounds, min(rounds, int(budget_s / max(clock() - began, 1e-9))))
        round_ += 1
    first = per_round[names[0]]
    scale = min(first) * 1e6
    return {name: scale * statistics.median(t / f for t, f in zip(per_round[name], first)) for name in names}


def _packed(weight: torch.Tensor):
    """oneDNN's packed copy of a weight, or None where this torch has no oneDNN linear."""
    if not torch.backends.mkldnn.is_available():
        return None
    try:
        return torch.ops.mkldnn._reorder_linear_weight(weight, None)
    except (RuntimeError, AttributeError):
        return None


@torch.inference_mode()
def measure_shape(shape: Shape, *, clock: Callable[[], float] = time.perf_counter) -> Times:
    """Each kernel's time per call for a float32 weight of `shape` at each row count of ROWS (random values; the
    copies of the matrix cycled: module docstring)."""
    out_features, in_features = shape
    copies = max(1, min(MAX_COPIES, math.ceil(WORKSET_BYTES / (4 * out_features * in_features))))
    gen = torch.Generator().manual_seed(0)
    rows_major = [torch.rand(shape, generator=gen) - 0.5 for _ in range(copies)]
    column_major = [w.t().contiguous().t() for w in rows_major]
    packs = [_packed(w) for w in rows_major]
    times: Times = {}
    for rows in ROWS:
        x = torch.rand(1, rows, in_features, generator=gen) - 0.5
        kernels: dict[str, Callable[[int], object]] = {
            COLUMN_MAJOR: lambda i: F.linear(x, column_major[i]),
            ROW_MAJOR: lambda i: F.linear(x, rows_major[i]),
        }
        if all(p is not None for p in packs):
            kernels[PACKED] = lambda i: torch.ops.mkldnn._linear_pointwise(x, packs[i], None, "none", [], "")
        times[rows] = time_kernels(kernels, copies, clock=clock)
    return times


def cpu_key() -> dict:
    """What the cached times depend on (module docstring); threads: torch's current intra-op thread count."""
    return {
        "format": FORMAT,
        "cpu": cpu.model_name(),
        "flags": hashlib.sha256(cpu.flags().encode()).hexdigest()[:16],
        "torch": torch.__version__,
        "mkl": torch.backends.mkl.is_available(),
        "onednn": torch.backends.mkldnn.is_available(),
        "threads": torch.get_num_threads(),
        "env": {name: os.environ[name] for name in KERNEL_ENV if name in os.environ},
        "rows": list(ROWS),
    }


def cache_file(root: Path, key: Mapping) -> Path:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    name = re.sub(r"[^A-Za-z0-9]+", "-", str(key.get("cpu") or "cpu")).strip("-").lower()[:48]
    return root / "matmul" / f"{name}-{digest}.json"


def _valid_times(entry) -> Times | None:
    """An entry of the cache file as Times, or None where it lacks a row count or a dense kernel's time."""
    if not isinstance(entry, dict):
        return None
    times: Times = {}
    for rows in ROWS:
        cell = entry.get(str(rows))
        if not isinstance(cell, dict) or not all(k in cell for k in DENSE):
            return None
        if not all(
            k in (*DENSE, PACKED) and isinstance(v, (int, float)) and math.isfinite(v) and v > 0
            for k, v in cell.items()
        ):
            return None
        times[rows] = {k: float(v) for k, v in cell.items()}
    return times


class Calibration:
    """Measured times per weight shape for one CPU key, read from and added to its cache file (`path`; None: this
    process only). `measure` times one shape (`measure_shape`; tests pass a fake); `measured` counts its calls."""

    def __init__(self, path: Path | None, key: Mapping, measure: Measure = measure_shape):
        self.path, self.key, self.measure = path, dict(key), measure
        self.times: dict[Shape, Times] = {}
        self.measured = 0
        self._lock = threading.Lock()

    def plan(self, shape: Shape, default: KernelPlan) -> KernelPlan:
        return choose(self.times_of(shape), default)

    def times_of(self, shape: Shape) -> Times:
        shape = (int(shape[0]), int(shape[1]))
        with self._lock:
            if shape not in self.times:
                with self._file_lock():
                    stored = self._read()
                    self.times.update(stored)
                    if shape not in self.times:
                        started = time.perf_counter()
                        self.times[shape] = self.measure(shape)
                        self.measured += 1
                        log.info(
                            "measured the float32 matmul kernels for %d x %d in %.2f s",
                            *shape,
                            time.perf_counter() - started,
                        )
                        self._write({**stored, shape: self.times[shape]})
            return self.times[shape]

    @contextlib.contextmanager
    def _file_lock(self) -> Iterator[None]:
        """An exclusive lock beside the cache file (released when the holder exits, even by a crash); without one
        (no cache, a read-only folder) the measurement goes ahead alone."""
        if self.path is None:
            yield
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            handle = open(self.path.with_name(self.path.name + ".lock"), "a")
        except OSError:
            yield
            return
        with handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX)
            except OSError:
                pass
            yield

    def _read(self) -> dict[Shape, Times]:
        if self.path is None:
            return {}
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError) as exc:
            if self.path.exists():
                log.warning("%s: unreadable (%s); measuring again", self.path, exc)
            return {}
        if not isinstance(data, dict) or data.get("key") != self.key or not isinstance(data.get("shapes"), dict):
            log.warning("%s: not this CPU's matmul times; measuring again", self.path)
            return {}
        stored: dict[Shape, Times] = {}
        for name, entry in data["shapes"].items():
            dims = re.fullmatch(r"(\d+)x(\d+)", str(name))
            times = _valid_times(entry)
            if dims and times is not None:
                stored[(int(dims[1]), int(dims[2]))] = times
        return stored

    def _write(self, shapes: Mapping[Shape, Times]) -> None:
        if self.path is None:
            return
        data = {
            "key": self.key,
            "shapes": {
                f"{o}x{i}": {str(r): {k: round(v, 2) for k, v in cell.items()} for r, cell in times.items()}
                for (o, i), times in sorted(shapes.items())
            },
        }
        try:
            write_file(self.path, json.dumps(data, indent=1, sort_keys=True) + "\n")
        except OSError as exc:
            log.warning("%s: cannot write the matmul times (%s); they hold for this process only", self.path, exc)


@functools.lru_cache(maxsize=None)
def _calibration(path: Path, key_json: str) -> Calibration:
    return Calibration(path, json.loads(key_json))


def calibration() -> Calibration:
    """This process's Calibration for the current CPU key and cache dir (one per key: a thread-count change reads
    another file)."""
    key = cpu_key()
    return _calibration(cache_file(cache_dir(), key), json.dumps(key, sort_keys=True))
