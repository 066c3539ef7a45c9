"""The speculative methods specbuild knows, one module each; the recipe's `speculation` union is derived from
this registry. `describe(recipe)` is the runtime-neutral description of a recipe's speculation."""

from __future__ import annotations

from typing import TYPE_CHECKING

from specbuild.methods.base import Method
from specbuild.methods.draft_target import DraftTarget
from specbuild.methods.eagle import Eagle
from specbuild.methods.eagle3 import Eagle3
from specbuild.methods.lookahead import Lookahead
from specbuild.methods.medusa import Medusa
from specbuild.methods.mtp import Mtp
from specbuild.methods.none import NoSpeculation
from specbuild.methods.prompt_lookup import PromptLookup

if TYPE_CHECKING:
    from specbuild.recipe.schema import Recipe
    from specbuild.speculation import Speculation

METHODS: dict[str, Method] = {
    m.name: m for m in (NoSpeculation(), Medusa(), Eagle(), Eagle3(), DraftTarget(), PromptLookup(), Lookahead(), Mtp())
}


def method_for(recipe: Recipe) -> Method:
    return METHODS[recipe.speculation.method]


def describe(recipe: Recipe) -> Speculation:
    """The recipe's speculation as a typed, frozen description (what every runtime translates), with the
    recipe's adaptive draft-length schedule (section `adaptive`, shared by every method)."""
    spec = method_for(recipe).describe(recipe)
    schedule = recipe.adaptive.draft_len_schedule
    if schedule is None or not spec.speculative:
        return spec
    from dataclasses import replace

    return replace(spec, draft_len_schedule=tuple(sorted((int(k), int(v)) for k, v in schedule.items())))


__all__ = ["METHODS", "Method", "describe", "method_for"]
