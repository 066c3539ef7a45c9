"""The dtype the tree drafters (Medusa heads, EAGLE heads) compute in."""

from __future__ import annotations

from typing import TYPE_CHECKING

from specbuild.errors import UserError

if TYPE_CHECKING:  # pragma: no cover
    import torch

BF16_DRAFTER_MIN_HIDDEN = 512  # below this, bf16 conversions cost more than the halved weight traffic saves


def drafter_dtype(decoding: dict, target_dtype: "torch.dtype", where: str, hidden_size: int,
                  lean: bool = False) -> "torch.dtype":
    """The dtype the tree drafters (Medusa heads, EAGLE head) compute in: `draft_dtype` in the engine's decoding
    options (`auto` | `float32` | `bfloat16` | `float16`). Drafts only propose tokens, so this never changes the
    output (the target verifies in its own dtype); it only changes speed and acceptance. `auto` picks bfloat16 for
    a float32 target on CPUs with native bf16 matrix instructions (avx512_bf16 / amx_bf16) when the drafter runs on
    the lean path (`lean`: oneDNN-packed bf16 weights, faster at every size measured; EAGLE-1 on the tiny zoo,
    hidden 256: 1.58x autoregressive with a bf16 head vs 1.21x in float32), or, with transformers' modules, when the
    model is wide enough (hidden size >= 512) for weight traffic to dominate (an EAGLE head forward plus lm_head at
    hidden 512 is ~1.3x faster in bf16; at hidden 256 fp32 is faster); the target's dtype otherwise."""
    import torch

    from specbuild.cpu import has_native_bf16

    choice = str(decoding.get("draft_dtype", "auto"))
    named = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    if choice == "auto":
        worth_it = lean or hidden_size >= BF16_DRAFTER_MIN_HIDDEN
        return torch.bfloat16 if target_dtype == torch.float32 and worth_it and has_native_bf16() else target_dtype
    if choice not in named:
        raise UserError(f"{where}.draft_dtype={choice!r}: use auto, float32, bfloat16 or float16")
    return named[choice]
