"""`Linear`: y = x W^T + b over a checkpoint's weight, with the float32 matmul this CPU runs fastest.

Two ways, chosen once per process (`float32_kernel`; SPECBUILD_REFERENCE_MATMUL = column-major | packed overrides):
- `column-major` (Intel CPUs with PyTorch's MKL): the weight is stored transposed (W^T contiguous, W a view of it),
  so `F.linear` hands MKL's sgemm/sgemv a plain [in, out] matrix instead of a transposed one. Measured on a 2-vCPU
  Intel Xeon (avx512, 1 thread, 2026-12-03), weights in cache, rows 1 / 5 / 16: lm_head 4096 x 256 180 / 228 / 399
  us vs 198 / 440 / 544 row-major (oneDNN-packed: 224 / 224 / 434), gate/up 1376 x 256 48 / 57 / 122 vs
  58 / 132 / 181. End to end (bench/layouts.py, tiny zoo, same engines interleaved) 1.08-1.18x the speed of the
  packed rule below at c = 1 and 1.07-1.09x at c = 16, outputs identical; oneDNN's kernels were slower here at
  every size.
- `packed` (any other CPU): a oneDNN-packed copy of the weight (`torch.ops.mkldnn._linear_pointwise`, the kernel
  PyTorch's inductor uses for frozen CPU linears) for several rows (chain or tree verification, draft trees,
  batches) of larger matrices and for every row count of lm-head-sized ones; one row of a small matrix (a decode
  step's projections) stays dense (`F.linear`; oneDNN's fixed cost is ~15 us a call). Measured on a 2-vCPU AMD EPYC
  (Zen 4), 1 thread: lm_head 4096 x 256 at 4 rows 81 us packed vs 217 us dense, at 8 rows 138 vs 318, at 1 row 114
  vs 139 (420 vs 760 with the weight out of cache); gate/up 1376 x 256 at 8 rows 64 vs 119; 768 x 256 at 1 row 26
  vs 14. (MKL picks its kernels by CPU vendor, which is why the two machines disagree; the column-major layout was
  not measured on AMD.) The packed copy costs the memory of those matrices once more.
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

from specbuild import cpu
from specbuild.errors import UserError

MATMUL_ENV = "SPECBUILD_REFERENCE_MATMUL"
COLUMN_MAJOR, PACKED = "column-major", "packed"
PACK_MIN_WEIGHTS = 150_000  # smaller float32 matrices: the dense matmul is as fast at every row count
PACK_MIN_WORK = 600_000  # rows * weights from which the packed kernel wins (2 rows of a 1376 x 256, 4 of a 768 x 256)
PACK_ALWAYS_WEIGHTS = 1_000_000  # float32 matrices this large (lm heads) are faster packed even for one row
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
    """Whether float32_kernel() stores weights of this dtype transposed (see the module docstring)."""
    return dtype == torch.float32 and float32_kernel() == COLUMN_MAJOR


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
        if column_major_layout(weight.dtype):
            self.weight = as_column_major(weight)
            return
        self.weight = weight
        n = weight.numel()
        if weight.dtype == torch.bfloat16:
            from_rows = 1
        elif weight.dtype == torch.float32 and n >= PACK_MIN_WEIGHTS:
            from_rows = 1 if n >= PACK_ALWAYS_WEIGHTS else max(2, math.ceil(PACK_MIN_WORK / n))
        else:
            return
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
