"""What the tensorrt-llm runtime refuses in a recipe, before anything runs (`specbuild check` shows each with its
location). Everything `specbuild plan` or `compile` would refuse because of the recipe is found here first."""

from __future__ import annotations

from typing import Iterator

from specbuild.facts.engine_facts import SpecMode
from specbuild.findings import Finding
from specbuild.recipe.deploy import expected_gpu_id_count, spans_nodes
from specbuild.checkpoints.checkpoint_files import architecture
from specbuild.runtimes.base import BuildOptions
from specbuild.speculation import DraftModel, DynamicTree, EagleHead, MedusaHeads, Speculation
from specbuild.trtllm.converters import (
    EAGLE_ARCHITECTURES,
    MEDUSA_MODEL_TYPES,
    TARGET_CONVERTERS,
    TRTLLM_MODEL_CLASSES,
    wheel_limits,
)

# The targets each method's engine-path converter takes (by params type), and the refusal of another
TARGET_ARCHITECTURES = {
    MedusaHeads: (
        MEDUSA_MODEL_TYPES,
        "TensorRT-LLM's Medusa supports llama, mixtral and qwen2 targets, not {arch} — "
        "use runtime: reference or another method",
    ),
    EagleHead: (
        EAGLE_ARCHITECTURES,
        "TensorRT-LLM's engine-path EAGLE covers Llama-architecture targets only "
        "(TensorRT-LLM #10396) — use runtime: reference or another method",
    ),
}
EXAMPLES_HINT = (
    "pass --trtllm-examples DIR (e.g. /app/examples in the NGC container) to use TensorRT-LLM's example converter"
)


# Modes TensorRT-LLM decodes greedily whatever a request's temperature says, checked against its sources:
# Medusa (examples/medusa/README.md "only supporting temperature=0.0", medusa_temperature=0); EAGLE-1
# (examples/eagle/README.md: greedy unless the executor's EagleConfig posterior_threshold turns on typical acceptance,
# which Triton's tensorrtllm backend has no parameter for, and which is not lossless sampling anyway;
# tensorrt_llm/runtime/model_runner_cpp.py); lookahead (its Jacobi n-grams are verified against the target's argmax: no
# request or parameter changes that). Draft-target and prompt lookup verify external drafts against the target's own
# (sampled) tokens or by logit ratio: they sample.
GREEDY_ONLY = {
    SpecMode.MEDUSA: "accepts Medusa drafts by token match at temperature 0",
    SpecMode.EAGLE: "accepts EAGLE drafts by token match (typical acceptance, its only sampled mode, "
    "has no Triton parameter and is not lossless)",
    SpecMode.LOOKAHEAD_DECODING: "verifies lookahead n-grams against the target's argmax",
}


def sampling_refusal(spec: Speculation) -> str:
    if spec.mode in GREEDY_ONLY:
        return (
            f"{spec.method} decodes greedily only on the tensorrt-llm runtime (TensorRT-LLM "
            f"{GREEDY_ONLY[spec.mode]}) — remove validation.sampling or pick another method"
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
    match spec.params:
        case DraftModel() as draft:
            ids = recipe.draft_gpu_device_ids
            if len(ids) != draft.tp_size:
                where = ("triton", "draft_gpu_device_ids") if t.draft_gpu_device_ids else ("speculation", "tp_size")
                yield Finding(
                    where,
                    f"the draft has tp_size {draft.tp_size} but {len(ids)} GPU id(s) "
                    f"({ids}) — give triton.draft_gpu_device_ids with {draft.tp_size} id(s)",
                )
        case _ if t.draft_gpu_device_ids is not None:
            yield Finding(
                ("triton", "draft_gpu_device_ids"),
                f"only draft_target has a draft engine, not {spec.method} — remove it",
            )
    if recipe.validation.sampling is not None:
        yield Finding(("validation", "sampling"), sampling_refusal(spec))
    if b.quantization == "fp8" and type(spec.params) in TARGET_CONVERTERS:  # Medusa, EAGLE
        yield Finding(
            ("build", "quantization"),
            f"fp8 {spec.method} goes through examples/quantization/quantize.py, "
            "which specbuild does not drive — use none, int8_weight_only or int4_weight_only",
        )
    if isinstance(spec.params, EagleHead) and b.kv_cache_type != "paged":
        yield Finding(
            ("build", "kv_cache_type"),
            "EAGLE engines need the paged KV cache (EagleForCausalLM.forward asserts it) — set kv_cache_type: paged",
        )
    if isinstance(spec.tree, DynamicTree):
        yield Finding(
            ("speculation", "dynamic_tree"),
            "EAGLE-2 (dynamic_tree) is not served by Triton's "
            "tensorrtllm backend (only run.py/the executor support it) — give a static tree with "
            "choices, or use runtime: reference",
        )
    if options.building and not options.trtllm_examples:
        for path, reason in wheel_limits(recipe, spec):
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
    if isinstance(spec.params, DraftModel):
        draft_arch = architecture(spec.params.path)
        if draft_arch is not None and draft_arch not in TRTLLM_MODEL_CLASSES:
            yield Finding(
                ("speculation", "checkpoint"),
                f"the draft's architecture {draft_arch} has no TensorRT-LLM "
                f"engine-path class known to specbuild (supported: {supported}) — pick a supported draft",
            )
    targets = TARGET_ARCHITECTURES.get(type(spec.params))
    if targets is not None and arch is not None and arch not in targets[0]:
        yield Finding(("model", "checkpoint"), targets[1].format(arch=arch))
