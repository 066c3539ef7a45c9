"""Medusa's part of the tensorrt-llm runtime (specbuild/trtllm/method_part.py): the target's converter (the wheel's
MedusaForCausalLm, or examples/medusa/convert_checkpoint.py), the targets it converts, and its greedy decoding."""

from __future__ import annotations

from typing import Iterator

from specbuild.checkpoints.checkpoint_files import architecture
from specbuild.findings import Finding
from specbuild.trtllm.checks import fp8_refusal
from specbuild.trtllm.converters import Converter
from specbuild.trtllm.method_part import TrtllmPart

# examples/medusa/convert_checkpoint.py --model_type choices
MEDUSA_MODEL_TYPES = {"LlamaForCausalLM": "llama", "MixtralForCausalLM": "mixtral", "Qwen2ForCausalLM": "qwen2"}


class MedusaTrtllm(TrtllmPart):
    greedy_only = "accepts Medusa drafts by token match at temperature 0"  # examples/medusa/README.md
    doctor_section = {"checkpoint": "heads", "num_heads": 4}

    def target_converter(self, recipe, spec, examples: str | None) -> Converter:
        heads = spec.params
        model_type = MEDUSA_MODEL_TYPES.get(architecture(recipe.model_dir) or "LlamaForCausalLM", "llama")
        if examples:
            return Converter(
                via="script",
                model_class="MedusaForCausalLm",
                script="medusa/convert_checkpoint.py",
                script_args=(
                    "--medusa_model_dir",
                    heads.path,
                    "--num_medusa_heads",
                    str(heads.num_heads),
                    "--num_medusa_layers",
                    str(heads.num_layers),
                    "--max_medusa_token_len",
                    str(spec.max_draft_len),
                    "--model_type",
                    model_type,
                ),
                reason="examples/medusa/convert_checkpoint.py from the given TensorRT-LLM examples tree",
            )
        # MedusaConfig.from_hugging_face reads speculative_config.num_medusa_heads (an attribute: the worker passes an
        # object), takes num_medusa_layers from the heads' config.json (medusa_num_layers, checked against the recipe)
        # and leaves max_draft_len at 63 unless it is given as a config field; the engine's Medusa inputs are sized by
        # the checkpoint's max_draft_len, so it must equal trtllm-build's --max_draft_len.
        return Converter(
            via="wheel",
            model_class="MedusaForCausalLm",
            kwargs={
                "speculative_model_dir": heads.path,
                "speculative_config": {"num_medusa_heads": heads.num_heads},
                "max_draft_len": spec.max_draft_len,
            },
            reason="wheel API with num_medusa_heads and max_draft_len passed explicitly (its config reader looks for "
            "num_medusa_heads, the heads config says medusa_num_heads; max_draft_len defaults to 63; "
            "tensorrt_llm/models/medusa/config.py)",
        )

    def wheel_limits(self, recipe, spec) -> list[tuple[tuple, str]]:
        out = []
        if recipe.model.dtype != "float16":
            out.append(
                (
                    ("model", "dtype"),
                    f"{recipe.model.dtype} with Medusa: the wheel's MedusaForCausalLm."
                    "from_hugging_face converts weights as float16 whatever dtype is asked (tensorrt_llm/"
                    "models/medusa/model.py)",
                )
            )
        if recipe.build.quantization != "none":
            out.append(
                (
                    ("build", "quantization"),
                    f"{recipe.build.quantization} with Medusa: the wheel's "
                    "MedusaForCausalLm.from_hugging_face converts the weights unquantized (float16) while the "
                    "checkpoint config would claim the quantization",
                )
            )
        return out

    def checks(self, recipe, spec, options) -> Iterator[Finding]:
        yield from fp8_refusal(recipe, spec)

    def file_checks(self, recipe, spec) -> Iterator[Finding]:
        arch = architecture(recipe.model_dir)
        if arch is not None and arch not in MEDUSA_MODEL_TYPES:
            yield Finding(
                ("model", "checkpoint"),
                f"TensorRT-LLM's Medusa supports llama, mixtral and qwen2 targets, not {arch} — "
                "use runtime: reference or another method",
            )


PART = MedusaTrtllm()
