"""Helpers of the validation-suite tests: the toy deployment's recipe and servers (a conftest is not importable
by name when several test folders have one)."""

from __future__ import annotations

import json
from pathlib import Path

from specbuild.methods import describe
from specbuild.recipe.schema import Recipe

TOY_DRAFT_LEN = 4  # the toy core's draft_len (linear chain: one path of depth 4)
TOY_MAX_TOKENS = 24


def toy_recipe_dict(tokenizer_dir: Path, **validation) -> dict:
    """An EAGLE recipe that describes the toy deployment (the toy ignores the checkpoint; the tokenizer is real)."""
    return {
        "name": "toy",
        "runtime": "reference",
        "model": {"checkpoint": str(tokenizer_dir), "tokenizer": str(tokenizer_dir)},
        "speculation": {
            "method": "eagle",
            "checkpoint": str(tokenizer_dir),
            "num_eagle_layers": TOY_DRAFT_LEN,
            "max_draft_len": TOY_DRAFT_LEN,
            "max_non_leaves_per_layer": 1,
            "choices": [[0] * d for d in range(1, TOY_DRAFT_LEN + 1)],
        },
        "build": {"max_batch_size": 8, "max_input_len": 448, "max_seq_len": 512},
        "triton": {"streaming": True},
        "validation": {
            "max_tokens": TOY_MAX_TOKENS,
            "concurrency": [1, 2, 4],
            "require_lossless": True,
            "min_acceptance_length": 1.5,
            "load_clients": 3,
            "load_seconds": 2.0,
            "sampling": {"temperature": 1.0, "trials": 200, "tokens": 2, "significance": 0.001},
            **validation,
        },
    }


def toy_recipe(tokenizer_dir: Path, **validation) -> Recipe:
    return Recipe.model_validate(toy_recipe_dict(tokenizer_dir, **validation))


def write_recipe_file(path: Path, data: dict) -> Path:
    """A recipe file (JSON is YAML)."""
    path.write_text(json.dumps(data, indent=2))
    return path


def core_parameters(recipe: Recipe) -> dict[str, str]:
    """The method parameters the served tensorrt_llm model must carry (what the repository writer puts there)."""
    from specbuild.repository.engine.speculation_params import core_parameters as speculation_parameters

    return speculation_parameters(describe(recipe))
