"""Rules of the recipe's `adaptive` section (a draft length per number of requests in flight, and the acceptance-rate
switch `disable_below`) that hold for every method and runtime. The schedule's own rules are TensorRT-LLM 1.2's (specbuild/standalone/draft_len_schedule.py,
llm_args.py `validate_draft_len_schedule_and_sort`, main after 1.3.0rc3); what each runtime and release can
follow is that runtime's or flavour's check (repository/engine/flavour.py, repository/llmapi/flavour.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

from specbuild.standalone.draft_len_schedule import draft_length, schedule_problems
from specbuild.findings import Finding
from specbuild.speculation import StaticTree
from specbuild.facts.trees import first_before_parent

if TYPE_CHECKING:
    from specbuild.recipe.schema import Recipe
    from specbuild.speculation import Speculation

FIELD = ("adaptive", "draft_len_schedule")
GATE_FIELD = ("adaptive", "disable_below")
LOOKAHEAD_REFUSAL = (
    "lookahead decoding has no draft length to follow the load: every step runs its whole (W, N, G) window "
    "(W*(N-1) lookahead tokens feeding the n-gram pool, plus up to G*(N-1) verified), and shrinking W or G per "
    "step would starve the pool it drafts from; TensorRT-LLM sets lookahead per request (lookahead_config), not "
    "per batch size — remove adaptive, lower window_size / verification_set_size, or use prompt_lookup"
)


def adaptive_findings(recipe: Recipe, spec: Speculation) -> Iterator[Finding]:
    yield from _disable_below_findings(recipe, spec)
    schedule = recipe.adaptive.draft_len_schedule
    if schedule is None:
        return
    if not spec.speculative:
        yield Finding(
            FIELD, "sets draft lengths but speculation.method is none — remove adaptive or choose a speculative method"
        )
        return
    full = spec.full_draft_length
    if full is None:  # lookahead: no draft length to scale (Speculation.full_draft_length)
        yield Finding(FIELD, LOOKAHEAD_REFUSAL, also=(("speculation", "method"),))
        return
    what = spec.full_draft_unit
    problems = schedule_problems(schedule, full)
    for key, message in problems:
        where = FIELD + (key,) if key is not None else FIELD
        yield Finding(where, message.replace("full draft length", f"full draft length ({what} per step)", 1))
    if not problems:
        yield from _spike_below_off_point(recipe, sorted(schedule.items()))
    largest = recipe.build.max_batch_size
    for key in sorted(schedule):
        if key > largest:
            yield Finding(
                FIELD + (key,),
                f"batch size {key} is never reached: build.max_batch_size is {largest} — "
                f"use a batch size <= {largest}, or raise build.max_batch_size",
            )
    if isinstance(spec.tree, StaticTree):
        yield from _prefix_order(recipe, spec.tree)


def _disable_below_findings(recipe: Recipe, spec: Speculation) -> Iterator[Finding]:
    """What every runtime refuses of adaptive.disable_below (which flavours and releases have the switch is their
    own check: repository/engine/flavour.py, repository/llmapi/flavour.py)."""
    if recipe.adaptive.disable_below is None:
        return
    if not spec.speculative:
        yield Finding(
            GATE_FIELD,
            "turns speculation off on poor acceptance, but speculation.method is none — remove "
            "adaptive.disable_below or choose a speculative method",
        )
    elif spec.full_draft_length is None:  # lookahead: its step is its whole window (Speculation.full_draft_length)
        yield Finding(
            GATE_FIELD,
            "lookahead decoding has no draft length that could drop to 0: every step runs its whole (W, N, G) "
            "window — remove adaptive.disable_below, or use prompt_lookup",
            also=(("speculation", "method"),),
        )


def off_point(points: list[tuple[int, int]]) -> int | None:
    """The smallest number of requests in flight at which a (valid, sorted) schedule drafts nothing (None: it
    never does)."""
    for batch_size, _ in points:
        if draft_length(points, batch_size) == 0:
            return batch_size
    return None


def _spike_below_off_point(recipe: Recipe, points: list[tuple[int, int]]) -> Iterator[Finding]:
    """validate's spike-and-recovery check needs a spike where the schedule drafts nothing."""
    spike, off = recipe.validation.spike.concurrency, off_point(points)
    if spike is not None and off is not None and spike < off:
        yield Finding(
            ("validation", "spike", "concurrency"),
            f"is {spike}, below {off}, where "
            f"adaptive.draft_len_schedule turns drafting off: that spike would not turn drafting off, so "
            f"recovery could not be checked — set it to at least {off}, or remove it (default: twice "
            "the off point, within build.max_batch_size)",
            also=(FIELD,),
        )


def _prefix_order(recipe: Recipe, tree: StaticTree) -> Iterator[Finding]:
    """A shorter tree is the first N choices in their order, so every choice's parent must come before it."""
    i = first_before_parent(tree.choices)
    if i is None:
        return
    path = list(tree.choices[i])
    written = getattr(recipe.speculation, "choices", None) is not None
    yield Finding(
        ("speculation", "choices", i) if written else ("speculation", "method"),
        f"choice {path} comes before its parent {path[:-1]}; with adaptive the tree at draft length N is "
        "the first N choices, so each parent must be listed before its children — move it after its "
        "parent (list the choices most valuable first)",
    )
