"""The runtimes specbuild builds for, by recipe name (the pattern of pre-commit's languages registry).

Each runtime lives in its own package and owns its dialect: how a `Speculation` becomes engine build steps,
which Triton core model serves the engines, how the server is launched, what it refuses. Nothing outside a
runtime's package compares runtime names: code asks `runtime_for(recipe)`.

Runtime modules are imported on first use (they import no heavy libraries at module load either).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from specbuild.recipe.schema import Recipe
    from specbuild.runtimes.base import Runtime

# recipe value -> "module:class"
REGISTRY: dict[str, str] = {
    "reference": "specbuild.reference.runtime:ReferenceRuntime",
    "tensorrt-llm": "specbuild.trtllm.runtime:TrtllmRuntime",
}
NAMES: tuple[str, ...] = tuple(REGISTRY)
DEFAULT = "reference"

_loaded: dict[str, Runtime] = {}


def get_runtime(name: str) -> Runtime:
    if name not in _loaded:
        module, cls = REGISTRY[name].split(":")
        _loaded[name] = getattr(importlib.import_module(module), cls)()
    return _loaded[name]


def runtime_for(recipe: Recipe) -> Runtime:
    return get_runtime(recipe.runtime)


__all__ = ["DEFAULT", "NAMES", "REGISTRY", "get_runtime", "runtime_for"]
