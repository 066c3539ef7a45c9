"""Cross-field rules of a recipe that hold for every method (method rules live in specbuild.methods)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

from specbuild.methods import method_for
from specbuild.methods.base import Finding

if TYPE_CHECKING:
    from specbuild.recipe.schema import Recipe


def general_findings(recipe: Recipe) -> Iterator[Finding]:
    method = method_for(recipe)
    b, v = recipe.build, recipe.validation

    if b.max_input_len >= b.max_seq_len:
        yield Finding(("build", "max_input_len"), f"is {b.max_input_len} but max_seq_len is {b.max_seq_len}; prompts "
                      "need room to generate — make max_input_len smaller than max_seq_len")
    if method.speculative and b.max_beam_width != 1:
        yield Finding(("build", "max_beam_width"), f"is {b.max_beam_width} but speculative decoding supports beam "
                      "width 1 only — set max_beam_width: 1 or method: none")
    if v.max_tokens >= b.max_seq_len:
        yield Finding(("validation", "max_tokens"), f"is {v.max_tokens} but max_seq_len is {b.max_seq_len} — "
                      "lower max_tokens so prompt + output fit")
    if len(set(v.concurrency)) != len(v.concurrency):
        yield Finding(("validation", "concurrency"), "lists a level twice — give each concurrency level once")
    if isinstance(v.prompts, list) and not v.prompts:
        yield Finding(("validation", "prompts"), "is an empty list — give at least one prompt or remove the key")
    if v.sampling is not None and recipe.runtime in method.greedy_only_on:
        yield Finding(("validation", "sampling"), f"{method.name} decodes greedily only on the {recipe.runtime} "
                      "runtime (TensorRT-LLM accepts Medusa drafts by token match at temperature 0) — remove "
                      "validation.sampling or pick another method")
    if v.sampling is not None and recipe.runtime != "reference":
        yield Finding(("validation", "sampling"), "the sampling-distribution check runs on the reference runtime "
                      "only (TensorRT-LLM's speculative sampling is not bit-exact) — remove it or use runtime: reference")
    if (v.min_speedup is not None or v.min_acceptance_length is not None) and not method.speculative:
        key = "min_speedup" if v.min_speedup is not None else "min_acceptance_length"
        yield Finding(("validation", key), "gates speculation but speculation.method is none — remove the gate")

    if recipe.runtime == "reference":
        yield from _reference_findings(recipe)
    else:
        yield from _gpu_findings(recipe)
    yield from method.checks(recipe)


def _reference_findings(recipe: Recipe) -> Iterator[Finding]:
    b = recipe.build
    for key in ("tp_size", "pp_size"):
        if getattr(b, key) != 1:
            yield Finding(("build", key), f"is {getattr(b, key)} but the reference runtime runs in one CPU process — "
                          f"set {key}: 1, or runtime: tensorrt-llm for multi-GPU engines")
    if b.quantization != "none":
        yield Finding(("build", "quantization"), "quantization is a TensorRT-LLM conversion option; the reference "
                      "runtime computes in float32 — set quantization: none or runtime: tensorrt-llm")
    spec = recipe.speculation
    if getattr(spec, "tp_size", 1) != 1:
        yield Finding(("speculation", "tp_size"), "the reference runtime runs the draft in one CPU process — set tp_size: 1")
    if getattr(spec, "use_draft_logits", False):
        yield Finding(("speculation", "use_draft_logits"), "the reference runtime's Triton models return no generation "
                      "logits, so the BLS cannot send draft logits — set use_draft_logits: false (token-comparison "
                      "acceptance is lossless too), or use runtime: tensorrt-llm")
    elif getattr(spec, "fast_logits", False):
        yield Finding(("speculation", "fast_logits"), "fast logits is a GPU-to-GPU transfer of TensorRT-LLM — remove it "
                      "for runtime: reference")


def _gpu_findings(recipe: Recipe) -> Iterator[Finding]:
    b, t = recipe.build, recipe.triton
    world = b.tp_size * b.pp_size
    if len(t.gpu_device_ids) != world:
        yield Finding(("triton", "gpu_device_ids"), f"lists {len(t.gpu_device_ids)} GPU(s) but tp_size * pp_size = "
                      f"{world} — list exactly {world} GPU id(s) in triton.gpu_device_ids",
                      also=(("build", "tp_size"), ("build", "pp_size")))
    if len(set(t.gpu_device_ids)) != len(t.gpu_device_ids):
        yield Finding(("triton", "gpu_device_ids"), "lists a GPU twice — each rank needs its own GPU")
    spec = recipe.speculation
    if spec.method == "draft_target":
        ids = recipe.draft_gpu_device_ids
        if len(ids) != spec.tp_size:
            where = ("triton", "draft_gpu_device_ids") if t.draft_gpu_device_ids else ("speculation", "tp_size")
            yield Finding(where, f"the draft has tp_size {spec.tp_size} but {len(ids)} GPU id(s) "
                          f"({ids}) — give triton.draft_gpu_device_ids with {spec.tp_size} id(s)")
    elif t.draft_gpu_device_ids is not None:
        yield Finding(("triton", "draft_gpu_device_ids"), f"only draft_target has a draft engine, not "
                      f"{spec.method} — remove it")
    if b.quantization == "fp8" and spec.method in ("medusa", "eagle"):
        yield Finding(("build", "quantization"), f"fp8 {spec.method} goes through examples/quantization/quantize.py, "
                      "which specbuild does not drive — use none, int8_weight_only or int4_weight_only")
