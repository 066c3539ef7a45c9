"""What `specbuild plan` shows of a repository: each model's backend and key parameters (display only; the
repository writer builds the real configs from the same functions in repository/engine/params.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from specbuild.files.paths import show
from specbuild.repository.engine import params as triton_params
from specbuild.repository.engine.configs import CORE_MODELS
from specbuild.repository.engine.speculation_params import DRAFT_MODEL_NAME

if TYPE_CHECKING:
    from specbuild.plan import Layout
    from specbuild.recipe.schema import Recipe
    from specbuild.repository.engine.core import EngineCore
    from specbuild.speculation import Speculation

# core parameters worth showing in a plan
SHOWN = (
    "gpt_model_path",
    "decoding_mode",
    "medusa_choices",
    "eagle_choices",
    "eagle_use_dynamic_tree",
    "eagle_dynamic_tree_max_top_k",
    "lookahead_window_size",
    "lookahead_ngram_size",
    "lookahead_verification_set_size",
    "exclude_input_in_output",
    "kv_cache_free_gpu_mem_fraction",
    "gpu_device_ids",
    "participant_ids",
)


def _short(value: str) -> str:
    return value if len(value) < 60 else value[:57] + "..."


def repository_info(
    recipe: Recipe, spec: Speculation, runtime: EngineCore, layout: Layout, role: str, serving: str
) -> dict[str, Any]:
    """`serving`: the model clients call for the speculative deployment (the baseline's is the ensemble)."""
    models: dict[str, Any] = {}
    for name in triton_params.repository_models(recipe, spec, role):
        info: dict[str, Any] = {}
        if name in CORE_MODELS:
            engine = layout.engine("draft" if name == DRAFT_MODEL_NAME else role)
            p = triton_params.core_parameters(recipe, spec, role, name, engine)
            info["backend"] = runtime.core_backend_label
            info["decoupled"] = triton_params.core_decoupled(recipe, spec, role)
            for k in SHOWN:
                if k in p:
                    info[k] = show(p[k]) if k == "gpt_model_path" else _short(p[k])
        elif name == "tensorrt_llm_bls":
            info.update(triton_params.bls_parameters(recipe, spec, role))
            info["decoupled"] = recipe.triton.streaming
        elif name == "ensemble":
            info["steps"] = "preprocessing -> tensorrt_llm -> postprocessing"
        else:
            info["tokenizer_dir"] = show(recipe.tokenizer_dir)
        models[name] = info
    return {
        "max_batch_size": recipe.build.max_batch_size,
        "serve requests at": serving if role == "target" else "ensemble",
        "models": models,
    }
