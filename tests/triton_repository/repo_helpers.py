"""Helpers of the Triton repository tests: recipes from recipes/, engine folders that carry only config.json."""

from __future__ import annotations

import json
from pathlib import Path

from specbuild.facts.engine_facts import expected_limits
from specbuild.methods import describe
from specbuild.plan import Layout
from specbuild.recipe.loader import load_recipe
from specbuild.repository.engine.writer import engine_roles

ROOT = Path(__file__).resolve().parents[2]
DOUBLE_LLMAPI_MODEL = ROOT / "tests" / "doubles" / "triton_backend" / "all_models" / "llmapi" / "tensorrt_llm" / "1"


def recipe_from(path: Path):
    return load_recipe(path, check_files=False)


def _of_flavour(folder: str, flavour: str) -> list[Path]:
    return [p for p in sorted((ROOT / "recipes" / folder).glob("*.yaml")) if recipe_from(p).flavour == flavour]


# engine-flavour examples (ensemble/BLS repositories) and llm-api examples (one tensorrt_llm model + model.yaml)
GPU_RECIPES = _of_flavour("tensorrt-llm", "engine")
REFERENCE_RECIPES = _of_flavour("reference", "engine")
GPU_LLMAPI_RECIPES = _of_flavour("tensorrt-llm", "llm-api")
REFERENCE_LLMAPI_RECIPES = _of_flavour("reference", "llm-api")


def write_llmapi_repository(recipe, layout: Layout, role: str = "target") -> Path:
    """An llm-api repository as compile writes it; the GPU runtime's NVIDIA model.py is the test double's."""
    from specbuild.repository.llmapi.writer import write_repository
    from specbuild.runtimes import runtime_for

    runtime = runtime_for(recipe)
    files = (
        {"model.py": DOUBLE_LLMAPI_MODEL / "model.py", "helpers.py": DOUBLE_LLMAPI_MODEL / "helpers.py"}
        if recipe.runtime == "tensorrt-llm"
        else runtime.model_files()
    )
    return write_repository(recipe, describe(recipe), layout, role, files)


def write_engine_configs(recipe, layout: Layout, role: str = "target", **changes) -> None:
    """Engine folders holding the config.json a build of this recipe writes (build_config from the plan's
    limits, as trtllm-build and the reference builder record them), with `changes` applied to
    build_config."""
    for _model, engine_role in engine_roles(recipe, describe(recipe), role).items():
        folder = layout.engine(engine_role)
        folder.mkdir(parents=True, exist_ok=True)
        build = dict(expected_limits(recipe, describe(recipe), engine_role).as_build_config(), **changes)
        config = {"version": "test", "pretrained_config": {}, "build_config": build}
        if recipe.runtime == "reference":  # the reference builder records itself; TensorRT-LLM does not
            config["specbuild"] = {"runtime": "reference", "role": engine_role, "method": recipe.speculation.method}
        (folder / "config.json").write_text(json.dumps(config))
