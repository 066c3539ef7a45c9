"""`Linear`: y = x W^T + b over a checkpoint's weight, picking the faster CPU matmul for the number of rows.

A oneDNN-packed copy of the weight (`torch.ops.mkldnn._linear_pointwise`, the kernel PyTorch's inductor uses for
frozen CPU linears) beats the dense matmul (MKL, which repacks the weight on every small-M call) for several rows
(chain or tree verification, draft trees, batches) of larger float32 matrices, and for every row count of
lm-head-sized ones; one row of a small matrix (a decode step's projections) is fastest dense (`F.linear`: MKL's
GEMV; oneDNN's fixed cost is ~15 us a call). Measured on a 2-vCPU AMD EPYC (Zen 4), 1 thread, float32: lm_head
4096 x 256 at 4 rows 81 us packed vs 217 us dense, at 8 rows 138 vs 318, at 1 row 114 vs 139 (420 vs 760 with the
weight out of cache); gate/up 1376 x 256 at 8 rows 64 vs 119; 768 x 256 at 1 row 26 vs 14. bfloat16 weights (draft
heads) are always packed (faster at every size measured). Same arithmetic as the dense matmul (results agree to
rounding); the packed copy costs the memory of those matrices once more.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

PACK_MIN_WEIGHTS = 150_000  # smaller float32 matrices: the dense matmul is as fast at every row count
PACK_MIN_WORK = 600_000  # rows * weights from which the packed kernel wins (2 rows of a 1376 x 256, 4 of a 768 x 256)
PACK_ALWAYS_WEIGHTS = 1_000_000  # float32 matrices this large (lm heads) are faster packed even for one row


class Linear:
    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None):
        self.weight, self.bias = weight, bias
        self.packed = None
        self.packed_from_rows = math.inf
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
