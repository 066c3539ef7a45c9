"""The `Runtime` interface: what a runtime does for a recipe in one flavour, from `specbuild check` to serving.

    checks / file_checks    what it refuses in a recipe (located findings, shown by `specbuild check`)
    engine_roles / engine_steps / build_engines
                            the engines it builds: typed plan steps, executed by `specbuild compile`
    repository_info / write_repository
                            the Triton repository it serves (what `plan` shows, and the files)
    serving_model / contract
                            the model clients call and the request contract they speak ("engine": the
                            ensemble/BLS tensors; "llm-api": NVIDIA's llmapi model tensors)
    serve_step / launcher   how the repository is started
    sampling_refusal        why the sampled-distribution check cannot run here (None: it can)
    owns_engine             whether an engine folder's config.json was built by this runtime

Flavour base classes implement the repository half: specbuild/repository/engine/flavour.py (engine),
specbuild/repository/llmapi/flavour.py (llm-api); each runtime package implements the rest.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Iterator

if TYPE_CHECKING:
    from specbuild.findings import Finding
    from specbuild.plan import Layout, Step
    from specbuild.recipe.schema import Recipe
    from specbuild.speculation import Speculation

Progress = Callable[[str], None]


@dataclass(frozen=True)
class BuildOptions:
    """Command-line options that change what a recipe builds (`check`, `plan` and `compile` take the same)."""

    trtllm_examples: str | None = None  # a TensorRT-LLM examples/ tree whose convert_checkpoint.py scripts to use
    building: bool = True  # False for `validate`: rules about how engines are built do not apply


class Runtime:
    name: ClassVar[str]
    flavour: ClassVar[str]
    contract: ClassVar[str]
    summary: ClassVar[str]
    # Why no deployment bundle (specbuild/deploy/) is written for this runtime; None: one is written.
    bundle_refusal: ClassVar[str | None] = None

    def checks(self, recipe: Recipe, spec: Speculation, options: BuildOptions) -> Iterator[Finding]:
        return iter(())

    def file_checks(self, recipe: Recipe, spec: Speculation, options: BuildOptions) -> Iterator[Finding]:
        return iter(())

    # --- engines ----------------------------------------------------------------------------------------------
    def engine_roles(self, recipe: Recipe) -> list[str]:
        """The engine folders a compile builds (target, draft, baseline), in order."""
        raise NotImplementedError

    def engine_steps(self, recipe: Recipe, spec: Speculation, layout: Layout, options: BuildOptions) -> list[Step]:
        raise NotImplementedError

    def build_engines(self, steps: list[Step], recipe: Recipe, layout: Layout, progress: Progress | None = None,
                      notice: Progress | None = None) -> dict[str, Path]:
        """Execute this runtime's steps of the plan; `notice` gets one-line messages worth keeping on screen."""
        raise NotImplementedError

    # --- repository -------------------------------------------------------------------------------------------
    def repository_info(self, recipe: Recipe, spec: Speculation, layout: Layout, role: str) -> dict[str, Any]:
        raise NotImplementedError

    def write_repository(self, recipe: Recipe, layout: Layout, role: str, progress: Progress | None = None,
                         notice: Progress | None = None, engines_built: bool = True) -> Path:
        """engines_built False (`compile --render-only`): the engines are not there to check against."""
        raise NotImplementedError

    def serving_model(self, spec: Speculation) -> str:
        raise NotImplementedError

    # --- serving ----------------------------------------------------------------------------------------------
    def serve_step(self, recipe: Recipe, layout: Layout, repo_roles: list[str]) -> Step:
        raise NotImplementedError

    def launcher(self, repository: Path) -> Path | None:
        """The script that starts a repository (None: specbuild starts tritonserver on it directly)."""
        return None

    def sampling_refusal(self, spec: Speculation) -> str | None:
        return None

    def notes(self, recipe: Recipe, spec: Speculation) -> list[str]:
        """What the runtime cannot vouch for in this recipe: not refusals, printed by `check`."""
        return []

    def owns_engine(self, config: dict) -> bool:
        raise NotImplementedError

    def call_costs(self, configs: dict[str, dict], texts: list[str], max_tokens: int, levels: list[int],
                   progress: Progress | None = None) -> list | None:
        """The cost model's per-call costs of served core models whose engines are on this machine, decoded here in
        process: one `specbuild.cost_model.LevelModel` per level. `configs`: the speculative and the baseline
        deployment's `tensorrt_llm` configs ("target", "baseline") and the draft core's ("draft") as served. None:
        this runtime's engines cannot be decoded here (the default)."""
        return None
