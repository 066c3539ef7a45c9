"""The `Runtime` interface: what a runtime does for a recipe, from `specbuild check` to serving.

    checks / file_checks    what this runtime refuses in a recipe (located findings, shown by `specbuild check`)
    engine_steps            the typed plan steps that build the engines (rendered by `specbuild plan`)
    build_engines           executes those steps (called by `specbuild compile`)
    core_backend / core_model_files   the Triton backend of `tensorrt_llm` (and `tensorrt_llm_draft`) and the
                            files its version folder needs
    repository_files        extra files at the repository root (a launch script)
    serve_step / launcher   how the repository is started
    sampling_refusal        why the sampled-distribution check cannot run here (None: it can)
    owns_engine             whether an engine folder's config.json was built by this runtime
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, ClassVar, Iterator

if TYPE_CHECKING:
    from specbuild.methods.base import Finding
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
    summary: ClassVar[str]
    core_backend: ClassVar[str]  # backend of the tensorrt_llm / tensorrt_llm_draft models in config.pbtxt
    core_backend_label: ClassVar[str]  # the same, in words for `specbuild plan`

    def checks(self, recipe: Recipe, spec: Speculation, options: BuildOptions) -> Iterator[Finding]:
        return iter(())

    def file_checks(self, recipe: Recipe, spec: Speculation, options: BuildOptions) -> Iterator[Finding]:
        return iter(())

    def engine_steps(self, recipe: Recipe, spec: Speculation, layout: Layout, options: BuildOptions) -> list[Step]:
        raise NotImplementedError

    def build_engines(self, steps: list[Step], recipe: Recipe, layout: Layout, progress: Progress | None = None,
                      notice: Progress | None = None) -> dict[str, Path]:
        """Execute this runtime's steps of the plan; `notice` gets one-line messages worth keeping on screen."""
        raise NotImplementedError

    def core_model_files(self) -> dict[str, Path]:
        """Files written into `tensorrt_llm/1/` (and the draft's): name -> source path."""
        return {}

    def repository_files(self, recipe: Recipe, role: str) -> dict[str, str]:
        """Extra files at the repository root: relative path -> text."""
        return {}

    def serve_step(self, recipe: Recipe, layout: Layout, repo_roles: list[str]) -> Step:
        raise NotImplementedError

    def launcher(self, repository: Path) -> Path | None:
        """The script that starts a repository (None: specbuild starts tritonserver on it directly)."""
        return None

    def sampling_refusal(self, spec: Speculation) -> str | None:
        return None

    def owns_engine(self, config: dict) -> bool:
        raise NotImplementedError
