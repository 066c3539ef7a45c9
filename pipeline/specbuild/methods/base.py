"""What every speculative method module provides: its recipe section, its checks, and the runtime-neutral
description of its speculation (specbuild.speculation). Runtimes translate the description; a method module
knows nothing of TensorRT-LLM flags, engine folders or Triton parameters."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, Iterator

from specbuild.findings import Finding
from specbuild.section import Section

if TYPE_CHECKING:
    from specbuild.recipe.schema import Recipe
    from specbuild.speculation import Speculation


class Method:
    """Base for the per-method modules. Subclasses set the class attributes and implement `describe`."""

    name: ClassVar[str]
    Config: ClassVar[type[Section]]
    summary: ClassVar[str] = ""

    def describe(self, recipe: Recipe) -> Speculation:
        raise NotImplementedError

    def checks(self, recipe: Recipe) -> Iterator[Finding]:
        """Rules of the method's own section that hold on every runtime."""
        return iter(())

    def file_checks(self, recipe: Recipe) -> Iterator[Finding]:
        """Checks that read the checkpoints named by the recipe (skipped when they are unreadable)."""
        return iter(())
