"""A recipe resolved once for a command: its method, its speculation's description, its runtime, and the engines it
makes, one per role (specbuild.runtimes.roles).

    build = resolve_build(recipe, options)   # method_for, describe and runtime_for, each called once here

Every command that reads a recipe (`check`, `plan`, `compile`, `validate`, `doctor`) resolves it once when it
loads it (specbuild.load.load_build) and hands the `Build` (or its parts) to the stages; no stage looks the
runtime or the description up again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from specbuild.methods import describe, method_for
from specbuild.runtimes import runtime_for
from specbuild.runtimes.base import BuildOptions
from specbuild.runtimes.roles import Role, resolve_roles

if TYPE_CHECKING:
    from specbuild.methods.pack import MethodPack
    from specbuild.recipe.schema import Recipe
    from specbuild.runtimes.base import Runtime
    from specbuild.speculation import Speculation


@dataclass(frozen=True)
class Build:
    """What a command builds, serves or validates: the recipe and what it resolved to."""

    recipe: Recipe
    method: MethodPack  # the speculative method's pack (specbuild/methods/<name>/)
    spec: Speculation  # the runtime-neutral description of the recipe's speculation
    runtime: Runtime  # the runtime in the recipe's flavour (specbuild/runtimes/)
    options: BuildOptions  # the command-line options that change what it builds
    roles: dict[str, Role]  # its engines by role (target, draft, baseline): limits, checkpoints, the method's keys


def resolve_build(recipe: Recipe, options: BuildOptions | None = None) -> Build:
    """`recipe` resolved; an llm-api recipe that names nowhere it will run takes its release from the TensorRT-LLM
    its runtime has installed here (Recipe.with_installed_trtllm: the recipe of the Build is then that copy)."""
    runtime = runtime_for(recipe)
    recipe = recipe.with_installed_trtllm(runtime.installed_release)
    spec = describe(recipe)
    return Build(
        recipe=recipe,
        method=method_for(recipe),
        spec=spec,
        runtime=runtime,
        options=options or BuildOptions(),
        roles=resolve_roles(recipe, spec),
    )


__all__ = ["Build", "resolve_build"]
