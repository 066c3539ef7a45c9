"""The runtimes specbuild builds for, by recipe `runtime` and `flavour` (the pattern of pre-commit's languages
registry).

A runtime is what runs the model: `tensorrt-llm` (NVIDIA GPUs) or `reference` (specbuild's own PyTorch
implementation, on a CPU). A flavour is the generation of TensorRT-LLM's serving contract it speaks: `engine`
(trtllm-build engines served by the C++ tensorrtllm backend through an ensemble/BLS repository) or `llm-api`
(the PyTorch backend: one Python model configured by model.yaml). Each pair lives in its runtime's package and
owns its dialect; nothing outside a runtime's package compares runtime or flavour names: a command resolves its
recipe's runtime once (`runtime_for(recipe)`, called by specbuild.runtimes.build.resolve_build) and hands it down.

Runtime modules are imported on first use (they import no heavy libraries at module load either).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from specbuild.runtimes.registry import DEFAULT, DEFAULT_FLAVOUR, FLAVOURS, NAMES, REGISTRY

if TYPE_CHECKING:
    from specbuild.recipe.schema import Recipe
    from specbuild.runtimes.base import Runtime

_loaded: dict[tuple[str, str], Runtime] = {}


def get_runtime(name: str, flavour: str = DEFAULT_FLAVOUR) -> Runtime:
    key = (name, flavour)
    if key not in _loaded:
        module, cls = REGISTRY[key].split(":")
        _loaded[key] = getattr(importlib.import_module(module), cls)()
    return _loaded[key]


def runtime_for(recipe: Recipe) -> Runtime:
    return get_runtime(recipe.runtime, recipe.flavour)


__all__ = ["DEFAULT", "DEFAULT_FLAVOUR", "FLAVOURS", "NAMES", "REGISTRY", "get_runtime", "runtime_for"]
