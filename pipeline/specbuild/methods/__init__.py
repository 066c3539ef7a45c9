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
from specbuild.speculation import DisableBelow

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
    recipe's adaptive draft-length schedule and acceptance-rate switch (section `adaptive`, shared by every method)."""
    spec = method_for(recipe).describe(recipe)
    schedule, gate = recipe.adaptive.draft_len_schedule, recipe.adaptive.disable_below
    if (schedule is None and gate is None) or not spec.speculative:
        return spec
    from dataclasses import replace

    return replace(
        spec,
        draft_len_schedule=None if schedule is None else tuple(sorted((int(k), int(v)) for k, v in schedule.items())),
        disable_below=None if gate is None else DisableBelow(float(gate.acceptance_rate), int(gate.window)),
    )


__all__ = ["METHODS", "Method", "describe", "method_for"]
