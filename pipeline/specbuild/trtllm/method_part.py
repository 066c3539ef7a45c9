"""What a method pack gives the tensorrt-llm runtime: its `trtllm.py` (specbuild/methods/<name>/trtllm.py), named by
the pack's `trtllm` member and loaded through the registry (specbuild.methods.load) when this runtime asks. A pack
without one converts its target with the plain model class and adds nothing to the checks or flags."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, Iterator, Protocol, runtime_checkable

from specbuild.errors import UserError
from specbuild.methods import load, pack_for
from specbuild.trtllm.converters import Converter, plain_converter

if TYPE_CHECKING:
    from specbuild.findings import Finding
    from specbuild.runtimes.base import BuildOptions
    from specbuild.speculation import Speculation


@runtime_checkable
class TrtllmPart(Protocol):
    """One method's part of the tensorrt-llm runtime (these defaults: nothing of its own)."""

    # Why TensorRT-LLM decodes it greedily whatever a request's temperature says; None: it samples.
    greedy_only: ClassVar[str | None] = None
    # The smallest recipe section whose engines take every trtllm-build flag the method adds (`specbuild doctor`).
    doctor_section: ClassVar[dict[str, Any]] = {}

    # The target's converter when its weights need more than the plain model class (None: the plain one).
    def target_converter(self, recipe: Any, spec: Speculation, examples: str | None) -> Converter | None:
        return None

    # Recipe values the wheel's converter cannot honour, as (field path, reason): an examples/ tree is needed.
    def wheel_limits(self, recipe: Any, spec: Speculation) -> list[tuple[tuple, str]]:
        return []

    # The trtllm-build flags the method adds to the engine of `role`.
    def build_flags(self, spec: Speculation, role: str) -> dict[str, str | None]:
        return {}

    # What the engine flavour refuses of the recipe (located findings).
    def checks(self, recipe: Any, spec: Speculation, options: BuildOptions) -> Iterator[Finding]:
        return iter(())

    # The same, reading the checkpoints the recipe names.
    def file_checks(self, recipe: Any, spec: Speculation) -> Iterator[Finding]:
        return iter(())

    # What the llm-api flavour of TensorRT-LLM refuses of the recipe.
    def llmapi_checks(self, recipe: Any, spec: Speculation) -> Iterator[Finding]:
        return iter(())


class _Nothing(TrtllmPart):
    """The part of a pack that has none."""


NOTHING = _Nothing()


def part_for(spec: Speculation) -> TrtllmPart:
    """The tensorrt-llm runtime's part of the method `spec` describes."""
    pack = pack_for(spec)
    return load(pack, pack.trtllm) if pack.trtllm is not None else NOTHING


def wheel_limits(recipe, spec: Speculation) -> list[tuple[tuple, str]]:
    """Why this recipe cannot use the wheel's converter for its target: (field path, reason) pairs."""
    return part_for(spec).wheel_limits(recipe, spec)


def target_converter(recipe, spec: Speculation, examples: str | None) -> Converter:
    """The target's converter: its method's (when its weights need more than the plain model class), else the
    plain one."""
    part = part_for(spec)
    if not examples:
        problems = part.wheel_limits(recipe, spec)
        if problems:  # trtllm/checks.py reports these with their location first
            raise UserError(f"{problems[0][1]} — pass --trtllm-examples DIR")
    return part.target_converter(recipe, spec, examples) or plain_converter(recipe.model_dir)


__all__ = ["NOTHING", "TrtllmPart", "part_for", "target_converter", "wheel_limits"]
