"""Knowledge shared by several methods: reading Hugging Face checkpoint configs, TensorRT-LLM model classes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specbuild.errors import UserError
from specbuild.methods.base import Converter

if TYPE_CHECKING:
    from specbuild.recipe.schema import Recipe

# tensorrt_llm/models/__init__.py MODEL_MAP (engine fact sheet §2.1): HF architecture -> TensorRT-LLM class.
TRTLLM_MODEL_CLASSES: dict[str, str] = {
    "LlamaForCausalLM": "LLaMAForCausalLM",
    "MistralForCausalLM": "LLaMAForCausalLM",
    "MixtralForCausalLM": "LLaMAForCausalLM",
    "Qwen2ForCausalLM": "QWenForCausalLM",
    "Qwen3ForCausalLM": "QWenForCausalLM",
}


def read_hf_config(folder: Path) -> dict[str, Any] | None:
    """The folder's config.json as a dict, or None when it is missing or unreadable."""
    try:
        return json.loads((Path(folder) / "config.json").read_text())
    except (OSError, ValueError):
        return None


def architecture(folder: Path) -> str | None:
    cfg = read_hf_config(folder)
    if not cfg:
        return None
    archs = cfg.get("architectures") or []
    return archs[0] if archs else None


def trtllm_model_class(folder: Path, field: str = "model.checkpoint") -> str:
    arch = architecture(folder)
    if arch is None:
        # Unreadable checkpoint: the recipe check reports it; plans fall back to the Llama class.
        return "LLaMAForCausalLM"
    if arch not in TRTLLM_MODEL_CLASSES:
        supported = ", ".join(sorted(TRTLLM_MODEL_CLASSES))
        raise UserError(
            f"{field}: architecture {arch} has no TensorRT-LLM engine-path class known to specbuild "
            f"(supported: {supported}) — use runtime: reference, or a supported model"
        )
    return TRTLLM_MODEL_CLASSES[arch]


def plain_converter(recipe: Recipe, folder: Path | None = None, field: str = "model.checkpoint") -> Converter:
    """Base/target/draft models: `<Class>.from_hugging_face(dir, dtype, mapping)` from the wheel (§2.1, §2.5)."""
    folder = folder or recipe.model_dir
    return Converter(
        via="wheel",
        model_class=trtllm_model_class(folder, field),
        reason="the wheel's from_hugging_face is reliable for plain decoder models (engine fact sheet §2.5)",
    )
