"""Cross-field rules of a recipe that hold for every method and runtime. Method rules live in the method's module
(specbuild/methods/), runtime rules in the runtime's package (`Runtime.checks`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

from specbuild.facts.bounds import draft_len_problem
from specbuild.findings import Finding
from specbuild.recipe.adaptive import adaptive_findings

if TYPE_CHECKING:
    from specbuild.recipe.schema import Recipe
    from specbuild.runtimes.build import Build

BASELINE_SUFFIX = "-baseline"


def general_findings(build: Build) -> Iterator[Finding]:
    """The recipe's own rules, its runtime's and its method's (the deploy rules are composed beside these by
    specbuild.load)."""
    recipe, spec = build.recipe, build.spec
    b, v = recipe.build, recipe.validation

    if recipe.name.endswith(BASELINE_SUFFIX):
        other = recipe.name[: -len(BASELINE_SUFFIX)]
        yield Finding(
            ("name",),
            f"'{recipe.name}' ends in '{BASELINE_SUFFIX}', so its repository "
            f"triton_repo/{recipe.name} would be the baseline repository of a recipe named '{other}' — "
            "choose a name that does not end in -baseline",
        )
    if b.max_input_len >= b.max_seq_len:
        yield Finding(
            ("build", "max_input_len"),
            f"is {b.max_input_len} but max_seq_len is {b.max_seq_len}; prompts "
            "need room to generate — make max_input_len smaller than max_seq_len",
        )
    if spec.speculative and b.max_beam_width != 1:
        yield Finding(
            ("build", "max_beam_width"),
            f"is {b.max_beam_width} but speculative decoding supports beam "
            "width 1 only — set max_beam_width: 1 or method: none",
        )
    yield from draft_chain_findings(recipe, spec)
    if v.max_tokens >= b.max_seq_len:
        yield Finding(
            ("validation", "max_tokens"),
            f"is {v.max_tokens} but max_seq_len is {b.max_seq_len} — lower max_tokens so prompt + output fit",
        )
    if len(set(v.concurrency)) != len(v.concurrency):
        yield Finding(("validation", "concurrency"), "lists a level twice — give each concurrency level once")
    if isinstance(v.prompts, list) and not v.prompts:
        yield Finding(("validation", "prompts"), "is an empty list — give at least one prompt or remove the key")
    if recipe.triton.stream_interval != 1 and not recipe.triton.streaming:
        yield Finding(
            ("triton", "stream_interval"),
            f"is {recipe.triton.stream_interval} but triton.streaming is "
            "false, so nothing streams — set streaming: true or remove stream_interval",
        )
    if (v.min_speedup is not None or v.min_acceptance_length is not None) and not spec.speculative:
        key = "min_speedup" if v.min_speedup is not None else "min_acceptance_length"
        yield Finding(("validation", key), "gates speculation but speculation.method is none — remove the gate")

    yield from adaptive_findings(recipe, spec)
    yield from build.runtime.checks(recipe, spec, build.options)
    yield from build.method.checks(recipe)


CHAIN_FIELDS = ("num_draft_tokens", "max_draft_len", "num_nextn_predict_layers")  # what sets a chain's length


def draft_chain_findings(recipe: Recipe, spec) -> Iterator[Finding]:
    """A chain of drafts (no tree, no lookahead window) fits the sequence (specbuild/facts/bounds.py), reported on the
    first field of the speculation section that sets its length too long (draft-target's max_draft_len defaults
    to num_draft_tokens: one finding, not two)."""
    if not spec.drafts_chain:
        return
    section = recipe.speculation
    for name in CHAIN_FIELDS:
        value = getattr(section, name, None)
        problem = draft_len_problem(value, recipe.build.max_seq_len) if isinstance(value, int) else None
        if problem:
            yield Finding(("speculation", name), problem, also=(("build", "max_seq_len"),))
            return
