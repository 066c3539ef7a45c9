"""Helpers of the Triton repository tests: recipes from recipes/, engine folders that carry only config.json."""

from __future__ import annotations

import json
from pathlib import Path

from specbuild.engine_facts import expected_limits
from specbuild.methods import describe
from specbuild.plan import Layout
from specbuild.recipe.loader import load_recipe
from specbuild.triton.repository import engine_roles

ROOT = Path(__file__).resolve().parents[2]
GPU_RECIPES = sorted((ROOT / "recipes" / "tensorrt-llm").glob("*.yaml"))
REFERENCE_RECIPES = sorted((ROOT / "recipes" / "reference").glob("*.yaml"))


def recipe_from(path: Path):
    return load_recipe(path, check_files=False)


def write_engine_configs(recipe, layout: Layout, role: str = "target", **changes) -> None:
    """Engine folders holding the config.json a build of this recipe writes (build_config from the plan's
    limits, as trtllm-build and the reference builder record them), with `changes` applied to
    build_config."""
    for _model, engine_role in engine_roles(recipe, role).items():
        folder = layout.engine(engine_role)
        folder.mkdir(parents=True, exist_ok=True)
        build = dict(expected_limits(recipe, describe(recipe), engine_role).as_build_config(), **changes)
        config = {"version": "test", "pretrained_config": {}, "build_config": build}
        if recipe.runtime == "reference":  # the reference builder records itself; TensorRT-LLM does not
            config["specbuild"] = {"runtime": "reference", "role": engine_role, "method": recipe.speculation.method}
        (folder / "config.json").write_text(json.dumps(config))
