"""How a Hugging Face checkpoint becomes a TensorRT-LLM checkpoint (TensorRT-LLM examples/*/convert_checkpoint.py), per
speculative method.

Two paths: the wheel's model classes (`<Class>.from_hugging_face`, driven by convert_worker in a child process),
or an examples/ convert_checkpoint.py from the TensorRT-LLM tree given with --trtllm-examples. The wheel's
Medusa and EAGLE converters ignore some arguments (tensorrt_llm/models/medusa/config.py,
tensorrt_llm/models/eagle/model.py); a method whose target needs more than the plain model class has its converter in
its pack (specbuild/methods/<name>/trtllm.py, `target_converter` and `wheel_limits`: when the recipe needs the
example script instead, which trtllm/checks.py reports before anything runs; trtllm/method_part.py asks them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specbuild.errors import UserError
from specbuild.checkpoints.checkpoint_files import architecture

# tensorrt_llm/models/__init__.py MODEL_MAP: HF architecture -> TensorRT-LLM class.
TRTLLM_MODEL_CLASSES: dict[str, str] = {
    "LlamaForCausalLM": "LLaMAForCausalLM",
    "MistralForCausalLM": "LLaMAForCausalLM",
    "MixtralForCausalLM": "LLaMAForCausalLM",
    "Qwen2ForCausalLM": "QWenForCausalLM",
    "Qwen3ForCausalLM": "QWenForCausalLM",
}


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
