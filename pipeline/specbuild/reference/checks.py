"""What the reference runtime refuses in a recipe (both flavours): it runs one CPU process and computes in
float32, so parallelism, quantization and GPU-only transfers are refused with the reason."""

from __future__ import annotations

from typing import Iterator

from specbuild.findings import Finding
from specbuild.methods import pack_for
from specbuild.methods.draft_target import DraftModel


def reference_findings(recipe, spec) -> Iterator[Finding]:
    b = recipe.build
    for key in ("tp_size", "pp_size"):
        if getattr(b, key) != 1:
            yield Finding(
                ("build", key),
                f"is {getattr(b, key)} but the reference runtime runs in one CPU "
                f"process — set {key}: 1, or runtime: tensorrt-llm for multi-GPU engines",
            )
    if b.quantization != "none":
        yield Finding(
            ("build", "quantization"),
            "quantization is a TensorRT-LLM conversion option; the "
            "reference runtime computes in float32 — set quantization: none or runtime: tensorrt-llm",
        )
    if isinstance(spec.params, DraftModel):
        yield from _draft_findings(spec.params)


def decoder_refusal(spec) -> str | None:
    """Why the reference runtime has no decoder for the method (None: it has one)."""
    pack = pack_for(spec)
    if pack.decoder is not None or pack.Params is None:  # no speculation decodes autoregressively
        return None
    refusal = pack.reference_refusal
    if refusal is None:
        return f"the reference runtime has no implementation of {spec.method} — use runtime: tensorrt-llm"
    return f"{refusal.why} — use {refusal.instead}"


def _draft_findings(draft: DraftModel) -> Iterator[Finding]:
    if draft.tp_size != 1:
        yield Finding(
            ("speculation", "tp_size"), "the reference runtime runs the draft in one CPU process — set tp_size: 1"
        )
    if draft.use_draft_logits:
        yield Finding(
            ("speculation", "use_draft_logits"),
            "the reference runtime's Triton models return no "
            "generation logits, so the BLS cannot send draft logits — set use_draft_logits: false "
            "(token-comparison acceptance is lossless too), or use runtime: tensorrt-llm",
        )
    elif draft.fast_logits:
        yield Finding(
            ("speculation", "fast_logits"),
            "fast logits is a GPU-to-GPU transfer of TensorRT-LLM — remove it for runtime: reference",
        )
