"""What every speculative method module provides: its recipe section, its checks, and the runtime-neutral
description of its speculation (specbuild.speculation). Runtimes translate the description; a method module
knows nothing of TensorRT-LLM flags, engine folders or Triton parameters."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Iterator

from pydantic import BaseModel, ConfigDict

if TYPE_CHECKING:
    from specbuild.recipe.schema import Recipe
    from specbuild.speculation import Speculation

Path_ = tuple[str | int, ...]


class Section(BaseModel):
    """A recipe section: unknown keys are errors (the loader adds a "did you mean")."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)


@dataclass(frozen=True)
class Finding:
    """A problem found by a recipe check, located by its field path, e.g. ("speculation", "choices", 3). A warning
    (a pairing that runs but lowers acceptance: specbuild/methods/preflight.py) is shown and refuses nothing."""

    path: Path_
    message: str
    also: tuple[Path_, ...] = ()  # where to point instead when `path` is not written in the recipe (a default)
    warning: bool = False


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
