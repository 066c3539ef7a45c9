"""`Linear`: y = x W^T + b over a checkpoint's weight, with the float32 matmul this CPU runs fastest for its shape.

Three kernels compute a float32 matmul (matmul_calibration.py): `column-major` (W stored transposed, so that
`F.linear` hands MKL's sgemv/sgemm a plain [in, out] matrix), `row-major` (W as the checkpoint stores it) and
`packed` (a oneDNN-packed copy through `torch.ops.mkldnn._linear_pointwise`, the kernel PyTorch's inductor uses for
frozen CPU linears). Which is fastest depends on the CPU, the shape and the rows a call multiplies (1 for a decode
step, k + 1 to verify a chain of k drafts, more for trees, batches and prefill), and no rule by vendor holds on
every CPU: on a Zen 3 with AVX2 only, the rule tuned on a Zen 4 (below) made verifying 6 tokens cost 1.72-1.78x a
one-token step (1.13x on the Zen 4) and the demo ran 1.71-1.86x instead of 2.24x (issue #39). So each weight
shape gets a `KernelPlan`, chosen once per process (`float32_plan`; SPECBUILD_REFERENCE_MATMUL = measured | column-major |
packed):
- `measured` (the default): at load, each distinct [out, in] of the model is timed with all three kernels at
  1, 2, 3, 4, 6, 8, 16 and 32 rows (a call of n rows takes the choice of the largest of these <= n), interleaved and
  robust to a busy machine, and the default rule's kernel is kept unless another is faster by more than 10%; the
  times are cached per CPU model, flags, torch and thread count in the specbuild cache dir (matmul_calibration.py
  says how, and what it costs: about 0.1-1 s per shape, once per CPU). Each shape keeps one dense layout (column-
  or row-major, the transformers modules sharing it) and a packed copy only where it wins some row counts.
- `column-major`, the default rule on Intel CPUs with PyTorch's MKL: every row count through the column-major
  weight. Measured on a 2-vCPU Intel Xeon (avx512, 1 thread, 2026-12-03), weights in cache, rows 1 / 5 / 16: lm_head
  4096 x 256 180 / 228 / 399 us vs 198 / 440 / 544 row-major (oneDNN-packed: 224 / 224 / 434), gate/up 1376 x 256
  48 / 57 / 122 vs 58 / 132 / 181.
- `packed`, the default rule on any other CPU: matrices of PACK_MIN_WEIGHTS or more also get a oneDNN-packed copy,
  used from PACK_FROM_ROWS rows; a matrix with more inputs than outputs (a down-projection, an EAGLE head's fc)
  keeps the checkpoint's row-major layout (MKL reads it faster than transposed for one and two rows there), the
  others are column-major. Measured on a 2-vCPU AMD EPYC (Zen 4, 1 thread, 2026-12-04), four copies of a matrix
  cycled with the caches flushed, rows 1 / 2 / 3 / 5: lm_head 4096 x 256 197 / 277 / 359 / 518 us column-major vs
  293 / 272 / 265 / 230 packed; a 256 x 256 matrix 25-31 us column-major at every row count vs 31-39 packed; the base
  zoo's down-projection 1024 -> 384 106-115 / 153-168 us row-major vs 164-184 / 261-286 column-major (rows 1 / 2).
  (MKL and oneDNN pick their code by vendor and instruction set, which is why machines disagree.)
The results are the dense matmul's whichever kernel runs (they agree to float32 rounding; greedy tokens identical in
tests/reference/test_lean_matmul.py). The packed copy costs the memory of its matrix once more. bfloat16 weights
(draft heads) are always packed (faster at every size measured). A column-major or row-major `nn.Parameter` is
relaid in place, so the transformers module holding it computes with the same (single) copy; such a model is for
decoding only: transformers' `save_pretrained` refuses non-contiguous weights (nothing in specbuild saves a model
it decodes with; save from a fresh load).
"""

from __future__ import annotations

import functools
import os
import warnings

import torch
import torch.nn.functional as F

from specbuild.errors import UserError
from specbuild.facts import cpu
from specbuild.reference.decoder.lean import matmul_calibration
from specbuild.reference.decoder.lean.matmul_calibration import COLUMN_MAJOR, PACKED, ROW_MAJOR, ROWS, KernelPlan

MATMUL_ENV = "SPECBUILD_REFERENCE_MATMUL"
MEASURED = "measured"
RULES = (MEASURED, COLUMN_MAJOR, PACKED)
LAST_ROWS = ROWS[-1]
PACK_MIN_WEIGHTS = 150_000  # the packed rule: smaller float32 matrices are as fast column-major at every row count
PACK_FROM_ROWS = 3  # the packed rule: fewer rows are as fast or faster column-major (module docstring)
INT8_MIN_WEIGHTS = 100_000  # smaller matrices are as fast or faster in float32 (module docstring)
INT8_ENGINES = ("x86", "fbgemm")  # PyTorch's quantized engines with fbgemm's dynamic int8 linear


@functools.lru_cache(maxsize=1)
def matmul_rule() -> str:
    """`measured` unless SPECBUILD_REFERENCE_MATMUL names a fixed rule (`column-major` or `packed`)."""
    choice = os.environ.get(MATMUL_ENV, "").strip()
    if choice and choice not in RULES:
        raise UserError(
            f"environment variable {MATMUL_ENV}={choice!r}: use {MEASURED} (the default), {COLUMN_MAJOR} or {PACKED}"
        )
    return choice or MEASURED


def default_rule() -> str:
    """The fixed rule a measurement must beat (by MARGIN): `column-major` where PyTorch's MKL runs on an Intel CPU,
    else `packed` (what each was tuned on: module docstring)."""
    return COLUMN_MAJOR if torch.backends.mkl.is_available() and cpu.vendor() == "GenuineIntel" else PACKED


def fixed_plan(shape: tuple[int, int], rule: str) -> KernelPlan:
    """A fixed rule's plan for a float32 weight [out, in]: `column-major` everywhere; or `packed`: a oneDNN-packed
    copy from PACK_FROM_ROWS rows for matrices of PACK_MIN_WEIGHTS or more, down-projections (in > out) row-major."""
    if rule == COLUMN_MAJOR:
        return KernelPlan(COLUMN_MAJOR)
    out_features, in_features = shape
    packed = (
        frozenset(r for r in ROWS if r >= PACK_FROM_ROWS) if out_features * in_features >= PACK_MIN_WEIGHTS else None
    )
    return KernelPlan(ROW_MAJOR if in_features > out_features else COLUMN_MAJOR, packed or frozenset())


def float32_plan(shape: tuple[int, int]) -> KernelPlan:
    """How a float32 weight of `shape` [out, in] is stored and multiplied: measured on this CPU (cached;
    matmul_calibration.py) against the default rule, or the fixed rule SPECBUILD_REFERENCE_MATMUL names."""
    rule = matmul_rule()
    if rule != MEASURED:
        return fixed_plan(shape, rule)
    return matmul_calibration.calibration().plan(shape, fixed_plan(shape, default_rule()))


def column_major_layout(dtype: torch.dtype, shape: tuple[int, int]) -> bool:
    """Whether a weight of this dtype and shape [out, in] is stored transposed (float32 ones whose plan says so)."""
    return dtype == torch.float32 and float32_plan(shape).dense == COLUMN_MAJOR


def as_column_major(weight: torch.Tensor) -> torch.Tensor:
    """`weight` [out, in] as a view of a contiguous [in, out]: a Parameter is relaid in place (its module follows),
    any other tensor is copied (unless it is laid out so already)."""
    if weight.t().is_contiguous():
        return weight
    return _relaid(weight, weight.detach().t().contiguous().t())


def as_row_major(weight: torch.Tensor) -> torch.Tensor:
    """`weight` [out, in] contiguous, relaid as `as_column_major` does."""
    if weight.is_contiguous():
        return weight
    return _relaid(weight, weight.detach().contiguous())


def _relaid(weight: torch.Tensor, relaid: torch.Tensor) -> torch.Tensor:
    if isinstance(weight, torch.nn.Parameter):
        weight.data = relaid
        return weight
    return relaid


NEVER = (False,) * (ROWS[-1] + 1)


class Linear:
    """y = x W^T + b; `plan` says how (None for bfloat16 weights: always packed)."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None):
        self.bias = bias
        self.packed = None
        self.plan: KernelPlan | None = None
        self.packed_at = NEVER  # by row count (capped at ROWS[-1]): whether the packed copy computes the call
        if weight.dtype == torch.bfloat16:
            self._pack(weight, (False,) + (True,) * ROWS[-1])
        elif weight.dtype == torch.float32:
            self.plan = float32_plan((int(weight.shape[0]), int(weight.shape[1])))
            if self.plan.packed_rows:
                self._pack(weight, tuple(r > 0 and self.plan.kernel(r) == PACKED for r in range(ROWS[-1] + 1)))
            weight = as_column_major(weight) if self.plan.dense == COLUMN_MAJOR else as_row_major(weight)
        self.weight = weight

    def _pack(self, weight: torch.Tensor, packed_at: tuple[bool, ...]) -> None:
        if not torch.backends.mkldnn.is_available():
            return
        try:
            with torch.no_grad():
                self.packed = torch.ops.mkldnn._reorder_linear_weight(weight.detach(), None)
        except (RuntimeError, AttributeError):  # a torch build without these oneDNN ops: dense only
            self.packed = None
        else:
            self.packed_at = packed_at

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.numel() // x.shape[-1]
        if self.packed_at[rows if rows < LAST_ROWS else LAST_ROWS]:
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
