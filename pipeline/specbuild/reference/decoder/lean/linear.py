"""`Linear`: y = x W^T + b over a checkpoint's weight, with the float32 matmul this CPU runs fastest.

Float32 weights are stored column-major (W^T contiguous, W a view of it), so that `F.linear` hands MKL's
sgemv/sgemm a plain [in, out] matrix instead of a transposed one (except down-projections under the packed rule,
below). Two rules for calls of several rows (chain or
tree verification, draft trees, batches), chosen once per process (`float32_kernel`;
SPECBUILD_REFERENCE_MATMUL = column-major | packed overrides):
- `column-major` (Intel CPUs with PyTorch's MKL): every row count through the column-major weight. Measured on a
  2-vCPU Intel Xeon (avx512, 1 thread, 2026-12-03), weights in cache, rows 1 / 5 / 16: lm_head 4096 x 256
  180 / 228 / 399 us vs 198 / 440 / 544 row-major (oneDNN-packed: 224 / 224 / 434), gate/up 1376 x 256 48 / 57 / 122
  vs 58 / 132 / 181. End to end (bench/layouts.py, tiny zoo) 1.08-1.18x the packed rule at c = 1 and 1.07-1.09x at
  c = 16; oneDNN's kernels were slower there at every size.
- `packed` (any other CPU): matrices of PACK_MIN_WEIGHTS or more also get a oneDNN-packed copy
  (`torch.ops.mkldnn._linear_pointwise`, the kernel PyTorch's inductor uses for frozen CPU linears), used from
  PACK_FROM_ROWS rows; fewer rows and smaller matrices go through the column-major weight. Measured on a 2-vCPU AMD
  EPYC (Zen 4, 1 thread, 2026-12-04), four copies of a matrix cycled with the caches flushed, rows 1 / 2 / 3 / 5:
  lm_head 4096 x 256 197 / 277 / 359 / 518 us column-major vs 293 / 272 / 265 / 230 packed; gate/up 1376 x 256
  67 / 84 / 113 / 183 vs 93 / 107 / 107 / 114; q/k/v 768 x 256 67 / 61 / 78 / 96 vs 67 / 77 / 75 / 59; a
  256 x 256 matrix 25-31 us column-major at every row count vs 31-39 packed. One row through row-major weights
  (this rule's single-row matmul until 2026-12-04) took 1.8x the column-major time there for a tiny-target
  forward's 17 matrices with the caches flushed (1.88 vs 1.05 ms): a one-token forward now takes 1.66 instead of
  1.87 ms, and end to end autoregressive decoding runs 1.08-1.13x and draft-target 1.06-1.11x faster, the other
  methods 0.98-1.03x (in-process A/B of the two versions, outputs identical). Against `column-major`
  (bench/layouts.py, results/layouts-tiny-c1-epyc.json) the packed copies make the speculative methods 1.15-1.24x
  faster there and leave autoregressive decoding as it is. The packed copy costs the memory of those matrices once
  more. (MKL picks its kernels by CPU vendor, which is why the two machines disagree.)
  Under this rule a matrix with more inputs than outputs (a down-projection, an EAGLE head's fc) keeps the
  checkpoint's row-major layout for the calls of one and two rows: there MKL reads it faster than transposed.
  Measured on the same EPYC (2026-12-04, eight copies cycled with the caches flushed, rows 1 / 2): the base zoo's
  down-projection 1024 -> 384 106-115 / 153-168 us row-major vs 164-184 / 261-286 column-major, 1376 -> 512
  219-297 / 335 vs 247-339 / 378-883, 688 -> 256 93-95 / 91-119 vs 112-134 / 106-126, an EAGLE fc 768 -> 384
  107 / 158 vs 141 / 173; square and wider-output matrices are as fast or faster column-major (q/k/v 384 -> 1152
  127 vs 212 us). A one-token forward of the base target: 12.05 vs 12.88 ms (interleaved medians), greedy tokens
  identical.
bfloat16 weights (draft heads) are always packed (faster at every size measured). Either way the arithmetic is the
dense matmul's (results agree to rounding). A column-major `nn.Parameter` is relaid in place, so the transformers
module holding it computes with the same (single) copy; such a model is for decoding only: transformers'
`save_pretrained` refuses its non-contiguous weights (nothing in specbuild saves a model it decodes with; save
from a fresh load).
"""

from __future__ import annotations

import functools
import math
import os
import warnings

import torch
import torch.nn.functional as F

from specbuild.facts import cpu
from specbuild.errors import UserError

MATMUL_ENV = "SPECBUILD_REFERENCE_MATMUL"
COLUMN_MAJOR, PACKED = "column-major", "packed"
PACK_MIN_WEIGHTS = 150_000  # smaller float32 matrices: the column-major matmul is as fast at every row count
PACK_FROM_ROWS = 3  # fewer rows: the column-major matmul is as fast or faster (module docstring)
INT8_MIN_WEIGHTS = 100_000  # smaller matrices are as fast or faster in float32 (module docstring)
INT8_ENGINES = ("x86", "fbgemm")  # PyTorch's quantized engines with fbgemm's dynamic int8 linear


@functools.lru_cache(maxsize=1)
def float32_kernel() -> str:
    """`column-major` where PyTorch's MKL runs on an Intel CPU, else `packed`; the environment variable overrides."""
    choice = os.environ.get(MATMUL_ENV, "").strip()
    if choice:
        if choice not in (COLUMN_MAJOR, PACKED):
            raise UserError(f"environment variable {MATMUL_ENV}={choice!r}: use {COLUMN_MAJOR} or {PACKED}")
        return choice
    return COLUMN_MAJOR if torch.backends.mkl.is_available() and cpu.vendor() == "GenuineIntel" else PACKED


def column_major_layout(dtype: torch.dtype) -> bool:
    """Whether weights of this dtype are stored transposed (float32 ones, under either rule: module docstring)."""
    return dtype == torch.float32


def as_column_major(weight: torch.Tensor) -> torch.Tensor:
    """`weight` [out, in] as a view of a contiguous [in, out]: a Parameter is relaid in place (its module follows),
    any other tensor is copied (unless it is laid out so already)."""
    if weight.t().is_contiguous():
        return weight
    relaid = weight.detach().t().contiguous().t()
    if isinstance(weight, torch.nn.Parameter):
        weight.data = relaid
        return weight
    return relaid


class Linear:
    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None):
        self.bias = bias
        self.packed = None
        self.packed_from_rows = math.inf
        if weight.dtype == torch.bfloat16:
            self._pack(weight, from_rows=1)
        elif weight.dtype == torch.float32:
            packed_rule = float32_kernel() == PACKED
            if packed_rule and weight.numel() >= PACK_MIN_WEIGHTS:
                self._pack(weight, from_rows=PACK_FROM_ROWS)
            if not (packed_rule and weight.shape[1] > weight.shape[0]):  # down-projections stay row-major there
                weight = as_column_major(weight)
        self.weight = weight

    def _pack(self, weight: torch.Tensor, from_rows: int) -> None:
        if not torch.backends.mkldnn.is_available():
            return
        try:
            with torch.no_grad():
                self.packed = torch.ops.mkldnn._reorder_linear_weight(weight.detach(), None)
        except (RuntimeError, AttributeError):  # a torch build without these oneDNN ops: dense only
            self.packed = None
        else:
            self.packed_from_rows = from_rows

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if x.numel() >= self.packed_from_rows * x.shape[-1]:
            return torch.ops.mkldnn._linear_pointwise(x.contiguous(), self.packed, self.bias, "none", [], "")
        return F.linear(x, self.weight, self.bias)


@functools.lru_cache(maxsize=1)
def int8_available() -> bool:
    """Whether this PyTorch runs fbgemm's dynamic int8 linear (an x86 build whose current quantized engine is x86
    or fbgemm, with the ops present)."""
    if torch.backends.quantized.engine not in INT8_ENGINES:
        return False
    try:
        Int8Linear(torch.ones(2, 2))(torch.ones(1, 2))
    except (RuntimeError, AttributeError):  # a build without the quantized ops (they are deprecated upstream)
        return False
    return True


class Int8Linear:
    """y = x W^T + b with W quantized to int8 per output channel and x per call (fbgemm; module docstring).
    The result is float32 and approximate (about 1e-2 of its largest value): for drafters only."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None):
        w = weight.detach().float().contiguous()
        scales = (w.abs().amax(dim=1) / 127).clamp_min(1e-12).double()
        zero_points = torch.zeros(w.shape[0], dtype=torch.long)
        with warnings.catch_warnings():  # quantized tensors are deprecated in PyTorch (pytorch/pytorch#184982)
            warnings.simplefilter("ignore")
            qweight = torch.quantize_per_channel(w, scales, zero_points, 0, torch.qint8)
            self.packed = torch.ops.quantized.linear_prepack(qweight, None if bias is None else bias.detach().float())

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        # reduce_range as torch.ao.nn.quantized.dynamic.Linear sets it for x86/fbgemm (7-bit activations: no
        # 16-bit saturation on CPUs without VNNI)
        return torch.ops.quantized.linear_dynamic(x.float().contiguous(), self.packed, True)


def drafting_linear(weight: torch.Tensor, bias: torch.Tensor | None = None, *, int8: bool = False):
    """A drafter's matmul: Int8Linear where asked for and worth it (a float32 weight of INT8_MIN_WEIGHTS or more,
    on a PyTorch that runs it), else Linear."""
    if int8 and weight.dtype == torch.float32 and weight.numel() >= INT8_MIN_WEIGHTS and int8_available():
        return Int8Linear(weight, bias)
    return Linear(weight, bias)
