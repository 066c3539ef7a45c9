"""The `Runtime` interface: what a runtime does for a recipe in one flavour, from `specbuild check` to serving.

`Runtime` is a Protocol that declares every member its callers use, one comment a member; the defaults are plain
methods. The flavour base classes implement the repository half and subclass it explicitly:
specbuild/repository/engine/flavour.py (engine), specbuild/repository/llmapi/flavour.py (llm-api); each runtime
package implements the rest.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Iterator, Protocol, runtime_checkable

if TYPE_CHECKING:
    from specbuild.findings import Finding
    from specbuild.plan import Layout, Step
    from specbuild.recipe.schema import Recipe
    from specbuild.runtimes.roles import Role
    from specbuild.speculation import Speculation

Progress = Callable[[str], None]


@dataclass(frozen=True)
class BuildOptions:
    """Command-line options that change what a recipe builds (`check`, `plan` and `compile` take the same)."""

    trtllm_examples: str | None = None  # a TensorRT-LLM examples/ tree whose convert_checkpoint.py scripts to use
    building: bool = True  # False for `validate`: rules about how engines are built do not apply


@runtime_checkable
class Runtime(Protocol):
    name: ClassVar[str]  # the recipe's `runtime` value
    flavour: ClassVar[str]  # the recipe's `flavour` value
    contract: ClassVar[str]  # the request contract clients speak: "engine" (ensemble/BLS tensors) or "llm-api"
    summary: ClassVar[str]  # what it is, in one line
    # The flavour's part of the deployment bundle, "module:object" (specbuild/deploy/, above this package: loaded by
    # specbuild.deploy.context.bundle_flavour).
    bundle: ClassVar[str]
    # Why no deployment bundle (specbuild/deploy/) is written for this runtime; None: one is written.
    bundle_refusal: ClassVar[str | None] = None

    # What it refuses in a recipe (located findings, shown by `specbuild check`).
    def checks(self, recipe: Recipe, spec: Speculation, options: BuildOptions) -> Iterator[Finding]:
        return iter(())

    # The same, for the files the recipe names (read only when they are there).
    def file_checks(self, recipe: Recipe, spec: Speculation, options: BuildOptions) -> Iterator[Finding]:
        return iter(())

    # --- engines ----------------------------------------------------------------------------------------------
    # The engine folders it builds.
    def engine_roles(self, recipe: Recipe, spec: Speculation) -> list[str]:
        """The engine folders a compile builds (target, draft, baseline), in order."""
        raise NotImplementedError

    # The typed plan steps that build them (`specbuild plan` shows them; `compile` executes them), from the build's
    # roles as it resolved them.
    def engine_steps(
        self, recipe: Recipe, spec: Speculation, roles: dict[str, Role], layout: Layout, options: BuildOptions
    ) -> list[Step]:
        raise NotImplementedError

    # Build them: execute its steps of the plan.
    def build_engines(
        self,
        steps: list[Step],
        recipe: Recipe,
        layout: Layout,
        progress: Progress | None = None,
        notice: Progress | None = None,
    ) -> dict[str, Path]:
        """Execute this runtime's steps of the plan; `notice` gets one-line messages worth keeping on screen."""
        raise NotImplementedError

    # --- repository -------------------------------------------------------------------------------------------
    # What `specbuild plan` shows of the Triton repository of one role (target, baseline).
    def repository_info(self, recipe: Recipe, spec: Speculation, layout: Layout, role: str) -> dict[str, Any]:
        raise NotImplementedError

    # Write that repository (atomically) and return its folder.
    def write_repository(
        self,
        recipe: Recipe,
        spec: Speculation,
        layout: Layout,
        role: str,
        progress: Progress | None = None,
        notice: Progress | None = None,
        engines_built: bool = True,
    ) -> Path:
        """engines_built False (`compile --render-only`): the engines are not there to check against."""
        raise NotImplementedError

    # The model clients call (the ensemble, the BLS, or NVIDIA's llm-api model).
    def serving_model(self, spec: Speculation) -> str:
        raise NotImplementedError

    # --- serving ----------------------------------------------------------------------------------------------
    # How the repositories are started (the plan's serve step).
    def serve_step(self, recipe: Recipe, spec: Speculation, layout: Layout, repo_roles: list[str]) -> Step:
        raise NotImplementedError

    # The launch script of a repository.
    def launcher(self, repository: Path) -> Path | None:
        """The script that starts a repository (None: specbuild starts tritonserver on it directly)."""
        return None

    # Why the sampled-distribution check cannot run here (None: it can).
    def sampling_refusal(self, spec: Speculation) -> str | None:
        return None

    # What `check` notes without refusing.
    def notes(self, recipe: Recipe, spec: Speculation) -> list[str]:
        """What the runtime cannot vouch for in this recipe: not refusals, printed by `check`."""
        return []

    # Whether an engine folder's config.json was built by this runtime.
    def owns_engine(self, config: dict) -> bool:
        raise NotImplementedError

    # The version of the TensorRT-LLM it runs, installed here (provenance, the bundle's image); None: none.
    def installed_release(self) -> str | None:
        return None

    # What in this machine's environment changes the files it writes (part of the build cache's keys).
    def written_from(self) -> dict[str, Any]:
        return {}

    # The cost model's measured per-call costs (validate's cost-model check).
    def call_costs(
        self,
        configs: dict[str, dict],
        texts: list[str],
        max_tokens: int,
        levels: list[int],
        progress: Progress | None = None,
    ) -> list | None:
        """The cost model's per-call costs of served core models whose engines are on this machine, decoded here in
        process: one `specbuild.facts.cost_model.LevelModel` per level. `configs`: the speculative and the baseline
        deployment's `tensorrt_llm` configs ("target", "baseline") and the draft core's ("draft") as served. None:
        this runtime's engines cannot be decoded here (the default)."""
        return None
