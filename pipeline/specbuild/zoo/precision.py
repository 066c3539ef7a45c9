"""Training precision of the zoo: bf16 autocast where the CPU computes bf16 natively, float32 elsewhere.

bf16 autocast halves the bytes moved per step on CPUs with bf16 matrix instructions (avx512_bf16, amx_bf16),
but on a CPU without them (e.g. AVX2 only) every bf16 matmul is emulated and a training step is ~20x slower
than in float32 (measured: 36 s vs 1.8 s per step of the tiny target on a 2-core AVX2 EPYC). `auto` picks
the fast one; the manifest records which one a build used, and `--resume-from` reuses only stages trained
at the same precision.
"""

from __future__ import annotations

import contextlib

from specbuild.facts.cpu import has_native_bf16
from specbuild.errors import UserError

BFLOAT16 = "bfloat16"
FLOAT32 = "float32"
CHOICES = ("auto", BFLOAT16, FLOAT32)
DESCRIPTIONS = {
    BFLOAT16: "bfloat16 autocast, float32 master weights (AdamW)",
    FLOAT32: "float32 (AdamW)",
}


def resolve(choice: str) -> str:
    """`auto` → bfloat16 where native, else float32; an explicit precision is kept as is."""
    if choice not in CHOICES:
        raise UserError(f"training precision {choice!r} is not one of {', '.join(CHOICES)}")
    if choice == "auto":
        return BFLOAT16 if has_native_bf16() else FLOAT32
    return choice


def autocast(precision: str, device_type: str = "cpu"):
    """The context a training forward runs in (`device_type`: where it computes, cpu or cuda)."""
    import torch

    if precision == BFLOAT16:
        return torch.autocast(device_type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def of_record(record: dict) -> str:
    """The precision an earlier build folder (manifest or stages record) was trained at."""
    if record.get("precision") in DESCRIPTIONS:
        return record["precision"]
    described = record.get("training_precision")
    for precision, text in DESCRIPTIONS.items():
        if described == text:
            return precision
    return BFLOAT16  # builds before the choice existed always trained under bf16 autocast
