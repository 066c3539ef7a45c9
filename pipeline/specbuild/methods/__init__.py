"""The speculative methods specbuild knows, one module each. `method_for(recipe)` picks the module's object."""

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

METHODS: dict[str, Method] = {m.name: m for m in
                              (NoSpeculation(), Medusa(), Eagle(), DraftTarget(), PromptLookup(), Lookahead())}


def method_for(recipe: Recipe) -> Method:
    return METHODS[recipe.speculation.method]


__all__ = ["METHODS", "Method", "method_for"]
