"""What the tensorrt-llm runtime refuses in a recipe, before anything runs (`specbuild check` shows each with its
location). Everything `specbuild plan` or `compile` would refuse because of the recipe is found here first."""

from __future__ import annotations

from typing import Iterator

from specbuild.findings import Finding
from specbuild.recipe.deploy import expected_gpu_id_count, spans_nodes
from specbuild.checkpoints.checkpoint_files import architecture
from specbuild.runtimes.base import BuildOptions
from specbuild.speculation import Speculation
from specbuild.trtllm.converters import TRTLLM_MODEL_CLASSES
from specbuild.trtllm.method_part import part_for

EXAMPLES_HINT = (
    "pass --trtllm-examples DIR (e.g. /app/examples in the NGC container) to use TensorRT-LLM's example converter"
)


def sampling_refusal(spec: Speculation) -> str:
    """Why the sampling-distribution check cannot run: the method decodes greedily here (its pack's part says,
    from TensorRT-LLM's sources; draft-target and prompt lookup verify external drafts against the target's own
    sampled tokens or by logit ratio: they sample), or the runtime's sampling is not bit-exact."""
    greedy = part_for(spec).greedy_only
    if greedy is not None:
        return (
            f"{spec.method} decodes greedily only on the tensorrt-llm runtime (TensorRT-LLM "
            f"{greedy}) — remove validation.sampling or pick another method"
        )
    return (
        "the sampling-distribution check runs on the reference runtime only (TensorRT-LLM's speculative "
        "sampling is not bit-exact) — remove it or use runtime: reference"
    )


def recipe_findings(recipe, spec: Speculation, options: BuildOptions) -> Iterator[Finding]:
    b, t = recipe.build, recipe.triton
    world = b.tp_size * b.pp_size
    need = expected_gpu_id_count(recipe, spec)  # tp * pp on one node; one node's GPUs when the world spans nodes
    if len(t.gpu_device_ids) != need:
        across = (
            f" (the world of {world} spans nodes of deploy.gpus_per_node = {need} GPUs: list one node's)"
            if spans_nodes(recipe, spec)
            else ""
        )
        yield Finding(
            ("triton", "gpu_device_ids"),
            f"lists {len(t.gpu_device_ids)} GPU(s) but tp_size * pp_size = "
            f"{world}{across} — list exactly {need} GPU id(s) in triton.gpu_device_ids",
            also=(("build", "tp_size"), ("build", "pp_size")),
        )
    if len(set(t.gpu_device_ids)) != len(t.gpu_device_ids):
        yield Finding(("triton", "gpu_device_ids"), "lists a GPU twice — each rank needs its own GPU")
    if not spec.has_draft_engine and t.draft_gpu_device_ids is not None:
        yield Finding(
            ("triton", "draft_gpu_device_ids"),
            f"method {spec.method} has no draft engine (only a method with a draft model has one) — remove it",
        )
    part = part_for(spec)
    if recipe.validation.sampling is not None:
        yield Finding(("validation", "sampling"), sampling_refusal(spec))
    yield from part.checks(recipe, spec, options)
    if options.building and not options.trtllm_examples:
        for path, reason in part.wheel_limits(recipe, spec):
            yield Finding(
                path,
                f"{reason} — {EXAMPLES_HINT}, or change the value",
                also=(("speculation", "max_draft_len"), ("speculation",)),
            )


def file_findings(recipe, spec: Speculation) -> Iterator[Finding]:
    arch = architecture(recipe.model_dir)
    supported = ", ".join(sorted(TRTLLM_MODEL_CLASSES))
    if arch is not None and arch not in TRTLLM_MODEL_CLASSES:
        yield Finding(
            ("model", "checkpoint"),
            f"architecture {arch} has no TensorRT-LLM engine-path class known to "
            f"specbuild (supported: {supported}) — use runtime: reference, or a supported model",
        )
    yield from part_for(spec).file_checks(recipe, spec)


def fp8_refusal(recipe, spec: Speculation) -> Iterator[Finding]:
    """fp8 for a method whose target has its own converter (Medusa, EAGLE)."""
    if recipe.build.quantization == "fp8":
        yield Finding(
            ("build", "quantization"),
            f"fp8 {spec.method} goes through examples/quantization/quantize.py, "
            "which specbuild does not drive — use none, int8_weight_only or int4_weight_only",
        )
