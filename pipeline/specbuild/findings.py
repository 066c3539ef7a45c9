"""What a recipe rule finds: a problem located by its field path (the loader turns the path into file:line:col)."""

from __future__ import annotations

from dataclasses import dataclass

Path_ = tuple[str | int, ...]


@dataclass(frozen=True)
class Finding:
    """A problem found by a recipe check, located by its field path, e.g. ("speculation", "choices", 3). A warning
    (a pairing that runs but lowers acceptance: specbuild/methods/preflight.py) is shown and refuses nothing."""

    path: Path_
    message: str
    also: tuple[Path_, ...] = ()  # where to point instead when `path` is not written in the recipe (a default)
    warning: bool = False
