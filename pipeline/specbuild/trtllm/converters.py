"""How a Hugging Face checkpoint becomes a TensorRT-LLM checkpoint (TensorRT-LLM examples/*/convert_checkpoint.py), per
speculative method.

Two paths: the wheel's model classes (`<Class>.from_hugging_face`, driven by convert_worker in a child process),
or an examples/ convert_checkpoint.py from the TensorRT-LLM tree given with --trtllm-examples. The wheel's
Medusa and EAGLE converters ignore some arguments (tensorrt_llm/models/medusa/config.py,
tensorrt_llm/models/eagle/model.py); `wheel_limits` says when the recipe needs the example script instead, and
trtllm/checks.py reports it before anything runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from specbuild.errors import UserError
from specbuild.checkpoints.checkpoint_files import architecture
from specbuild.speculation import EagleHead, MedusaHeads, Speculation

# tensorrt_llm/models/__init__.py MODEL_MAP: HF architecture -> TensorRT-LLM class.
TRTLLM_MODEL_CLASSES: dict[str, str] = {
    "LlamaForCausalLM": "LLaMAForCausalLM",
    "MistralForCausalLM": "LLaMAForCausalLM",
    "MixtralForCausalLM": "LLaMAForCausalLM",
    "Qwen2ForCausalLM": "QWenForCausalLM",
    "Qwen3ForCausalLM": "QWenForCausalLM",
}
# examples/medusa/convert_checkpoint.py --model_type choices
MEDUSA_MODEL_TYPES = {"LlamaForCausalLM": "llama", "MixtralForCausalLM": "mixtral", "Qwen2ForCausalLM": "qwen2"}
# The only targets TensorRT-LLM's engine-path EAGLE converts (TensorRT-LLM #10396)
EAGLE_ARCHITECTURES = ("LlamaForCausalLM",)
# The EAGLE values the wheel's EagleForCausalLM.from_hugging_face can build (tensorrt_llm/models/eagle/model.py)
EAGLE_WHEEL_LAYERS, EAGLE_WHEEL_DRAFT_LEN = 4, 63


@dataclass(frozen=True)
class Converter:
    via: str  # "wheel": the model class in the tensorrt_llm wheel; "script": an examples/ convert_checkpoint.py
    model_class: str  # e.g. "LLaMAForCausalLM" (tensorrt_llm.models)
    kwargs: dict[str, Any] = field(default_factory=dict)  # method-specific from_hugging_face arguments (Paths shown)
    script: str | None = None  # path inside a TensorRT-LLM examples/ tree, when via == "script"
    script_args: tuple[str | Path, ...] = ()  # method-specific script flags (Paths shown)
    reason: str = ""  # why this path was taken (printed in the plan)


def model_class(folder: Path) -> str | None:
    """The TensorRT-LLM class of a checkpoint; the Llama class when its config is unreadable (the recipe check
    reports that), None when the architecture has no engine-path class."""
    arch = architecture(folder)
    if arch is None:
        return "LLaMAForCausalLM"
    return TRTLLM_MODEL_CLASSES.get(arch)


def plain_converter(folder: Path) -> Converter:
    """Base/target/draft models: `<Class>.from_hugging_face(dir, dtype, mapping)` from the wheel
    (tensorrt_llm/models/)."""
    cls = model_class(folder)
    if cls is None:  # trtllm/checks.py refuses such a recipe first
        raise UserError(f"{folder}: architecture {architecture(folder)} has no TensorRT-LLM engine-path class")
    return Converter(
        via="wheel", model_class=cls, reason="the wheel's from_hugging_face is reliable for plain decoder models"
    )


def _medusa_wheel_limits(recipe, spec: Speculation) -> list[tuple[tuple, str]]:
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


def _eagle_wheel_limits(recipe, spec: Speculation) -> list[tuple[tuple, str]]:
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


def wheel_limits(recipe, spec: Speculation) -> list[tuple[tuple, str]]:
    """Why this recipe cannot use the wheel's converter for its target: (field path, reason) pairs."""
    method = TARGET_CONVERTERS.get(type(spec.params))
    return method.wheel_limits(recipe, spec) if method is not None else []


def _medusa(recipe, spec: Speculation, examples: str | None) -> Converter:
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


def _eagle(recipe, spec: Speculation, examples: str | None) -> Converter:
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


@dataclass(frozen=True)
class TargetConversion:
    """How the target of a method whose checkpoint carries its own weights converts: `convert(recipe, spec,
    examples)` and the recipe values the wheel's converter cannot honour (`wheel_limits`)."""

    convert: Callable[[Any, Speculation, str | None], Converter]
    wheel_limits: Callable[[Any, Speculation], list[tuple[tuple, str]]]


# Target converters of the methods whose weights need more than the plain model class, by params type; the others
# convert the target with its model class (plain_converter).
TARGET_CONVERTERS: dict[type, TargetConversion] = {
    MedusaHeads: TargetConversion(_medusa, _medusa_wheel_limits),
    EagleHead: TargetConversion(_eagle, _eagle_wheel_limits),
}


def target_converter(recipe, spec: Speculation, examples: str | None) -> Converter:
    method = TARGET_CONVERTERS.get(type(spec.params))
    if method is None:
        return plain_converter(recipe.model_dir)
    if not examples:
        problems = method.wheel_limits(recipe, spec)
        if problems:  # trtllm/checks.py reports these with their location first
            raise UserError(f"{problems[0][1]} — pass --trtllm-examples DIR")
    return method.convert(recipe, spec, examples)
