"""EAGLE-1's part of the tensorrt-llm runtime (specbuild/trtllm/method_part.py): the target's converter (the wheel's
EagleForCausalLM, or examples/eagle/convert_checkpoint.py), what the engine path refuses (EAGLE-2's dynamic tree, a
continuous KV cache, targets other than Llama), and its greedy decoding."""

from __future__ import annotations

from typing import Iterator

from specbuild.checkpoints.checkpoint_files import architecture
from specbuild.findings import Finding
from specbuild.speculation import DynamicTree
from specbuild.trtllm.checks import fp8_refusal
from specbuild.trtllm.converters import Converter
from specbuild.trtllm.method_part import TrtllmPart

# The only targets TensorRT-LLM's engine-path EAGLE converts (TensorRT-LLM #10396)
EAGLE_ARCHITECTURES = ("LlamaForCausalLM",)
# The EAGLE values the wheel's EagleForCausalLM.from_hugging_face can build (tensorrt_llm/models/eagle/model.py)
EAGLE_WHEEL_LAYERS, EAGLE_WHEEL_DRAFT_LEN = 4, 63


class EagleTrtllm(TrtllmPart):
    # examples/eagle/README.md: greedy unless the executor's EagleConfig posterior_threshold turns on typical
    # acceptance, which Triton's tensorrtllm backend has no parameter for (tensorrt_llm/runtime/model_runner_cpp.py)
    greedy_only = (
        "accepts EAGLE drafts by token match (typical acceptance, its only sampled mode, "
        "has no Triton parameter and is not lossless)"
    )
    doctor_section = {"checkpoint": "eagle"}

    def target_converter(self, recipe, spec, examples: str | None) -> Converter:
        head = spec.params
        if examples:
            return Converter(
                via="script",
                model_class="EagleForCausalLM",
                script="eagle/convert_checkpoint.py",
                script_args=(
                    "--eagle_model_dir",
                    head.path,
                    "--max_draft_len",
                    str(spec.max_draft_len),
                    "--num_eagle_layers",
                    str(head.num_eagle_layers),
                    "--max_non_leaves_per_layer",
                    str(head.max_non_leaves_per_layer),
                ),
                reason="examples/eagle/convert_checkpoint.py from the given TensorRT-LLM examples tree",
            )
        # EagleConfig.from_hugging_face reads speculative_config.num_eagle_layers / .max_non_leaves_per_layer as
        # attributes and kwargs['use_parallel_embedding'] / kwargs['embedding_sharding_dim'] without defaults
        # (KeyError when absent); it never sets max_draft_len (63).
        return Converter(
            via="wheel",
            model_class="EagleForCausalLM",
            kwargs={
                "speculative_model_dir": head.path,
                "speculative_config": {
                    "num_eagle_layers": head.num_eagle_layers,
                    "max_non_leaves_per_layer": head.max_non_leaves_per_layer,
                    "max_draft_len": spec.max_draft_len,
                },
                "use_parallel_embedding": False,
                "embedding_sharding_dim": 0,
            },
            reason="wheel API: safe only for 4 EAGLE layers and max_draft_len 63 (tensorrt_llm/models/eagle/model.py)",
        )

    def wheel_limits(self, recipe, spec) -> list[tuple[tuple, str]]:
        out = []
        head = spec.params
        if (head.num_eagle_layers, spec.max_draft_len) != (EAGLE_WHEEL_LAYERS, EAGLE_WHEEL_DRAFT_LEN):
            out.append(
                (
                    ("speculation", "num_eagle_layers"),
                    f"EAGLE with num_eagle_layers "
                    f"{head.num_eagle_layers} and max_draft_len {spec.max_draft_len}: the wheel's "
                    "EagleForCausalLM.from_hugging_face loads exactly 4 layers and leaves max_draft_len at 63 "
                    "(tensorrt_llm/models/eagle/model.py)",
                )
            )
        if recipe.build.quantization != "none":
            out.append(
                (
                    ("build", "quantization"),
                    f"{recipe.build.quantization} with EAGLE: examples/eagle/"
                    "convert_checkpoint.py handles quantized weights; the wheel's EagleForCausalLM path is only "
                    "known to work unquantized",
                )
            )
        return out

    def checks(self, recipe, spec, options) -> Iterator[Finding]:
        yield from fp8_refusal(recipe, spec)
        if recipe.build.kv_cache_type != "paged":
            yield Finding(
                ("build", "kv_cache_type"),
                "EAGLE engines need the paged KV cache (EagleForCausalLM.forward asserts it) — set kv_cache_type: "
                "paged",
            )
        if isinstance(spec.tree, DynamicTree):
            yield Finding(
                ("speculation", "dynamic_tree"),
                "EAGLE-2 (dynamic_tree) is not served by Triton's "
                "tensorrtllm backend (only run.py/the executor support it) — give a static tree with "
                "choices, or use runtime: reference",
            )

    def file_checks(self, recipe, spec) -> Iterator[Finding]:
        arch = architecture(recipe.model_dir)
        if arch is not None and arch not in EAGLE_ARCHITECTURES:
            yield Finding(
                ("model", "checkpoint"),
                "TensorRT-LLM's engine-path EAGLE covers Llama-architecture targets only "
                "(TensorRT-LLM #10396) — use runtime: reference or another method",
            )


PART = EagleTrtllm()
