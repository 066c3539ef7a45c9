"""The speculative methods specbuild knows, one module each; the recipe's `speculation` union is derived from
this registry. `describe(recipe)` is the runtime-neutral description of a recipe's speculation."""

from __future__ import annotations

from typing import TYPE_CHECKING

from specbuild.methods.base import Method
from specbuild.methods.draft_target import DraftTarget
from specbuild.methods.eagle import Eagle
from specbuild.methods.lookahead import Lookahead
from specbuild.methods.medusa import Medusa
from specbuild.methods.none import NoSpeculation
from specbuild.methods.prompt_lookup import PromptLookup

if TYPE_CHECKING:
    from specbuild.recipe.schema import Recipe
    from specbuild.speculation import Speculation

METHODS: dict[str, Method] = {m.name: m for m in
                              (NoSpeculation(), Medusa(), Eagle(), DraftTarget(), PromptLookup(), Lookahead())}


def method_for(recipe: Recipe) -> Method:
    return METHODS[recipe.speculation.method]


def describe(recipe: Recipe) -> Speculation:
    """The recipe's speculation as a typed, frozen description (what every runtime translates)."""
    return method_for(recipe).describe(recipe)


__all__ = ["METHODS", "Method", "describe", "method_for"]
