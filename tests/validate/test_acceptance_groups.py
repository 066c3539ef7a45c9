"""Acceptance per category and per context-length bucket: pooled per verification step, bootstrap intervals over
requests, and the per-category gate judged on the intervals (no server: records made here)."""

from __future__ import annotations

import numpy as np
import pytest

from specbuild.facts import metrics
from specbuild.recipe.schema import Recipe
from specbuild.validate.aggregate import BOOTSTRAP_RESAMPLES, CONFIDENCE, group_acceptance, length_bucket
from specbuild.validate.checks.acceptance import ALL_PROMPTS, _gate_outcome, gate_verdicts, grouped
from specbuild.validate.report.markdown import acceptance_group_lines
from specbuild.validate.stats import AcceptanceRecord


def record(i, accepted, steps, *, category="c", tokens=10, per_step=None, draft_len=4):
    return AcceptanceRecord(
        i,
        accepted + steps + 1,
        accepted,
        draft_len * steps,
        None,
        steps,
        metrics.mean_acceptance_length(accepted, steps),
        per_step,
        f"p{i}",
        "counters",
        category,
        tokens,
    )


def test_al_is_pooled_per_verification_step_not_per_request():
    # a long request accepting 3 per step and a short one accepting nothing: per-request mean would be 2.5
    g = group_acceptance("x", [record(0, 30, 10), record(1, 0, 2)])
    assert g.acceptance_length.value == pytest.approx(metrics.mean_acceptance_length(30, 12)) == pytest.approx(3.5)
    assert g.acceptance_rate.value == pytest.approx(metrics.acceptance_rate(30, 48))
    assert g.acceptance_length.low < g.acceptance_length.value < g.acceptance_length.high


def test_the_interval_is_the_bootstrap_percentile_interval_over_requests():
    rng = np.random.default_rng(1)
    records = [
        record(i, int(a), int(s)) for i, (a, s) in enumerate(zip(rng.integers(0, 20, 40), rng.integers(5, 12, 40)))
    ]
    g = group_acceptance("x", records, seed=7)
    assert g == group_acceptance("x", records, seed=7)  # seeded: the same records give the same interval
    # recomputed independently: resample requests, pool accepted / steps
    acc = np.array([r.accepted_draft_tokens for r in records])
    steps = np.array([r.steps for r in records])
    picks = np.random.default_rng(7).integers(0, len(records), (BOOTSTRAP_RESAMPLES, len(records)))
    boot = 1 + acc[picks].sum(1) / steps[picks].sum(1)
    tail = (1 - CONFIDENCE) / 2 * 100
    assert (g.acceptance_length.low, g.acceptance_length.high) == pytest.approx(
        tuple(np.percentile(boot, [tail, 100 - tail]))
    )
    # more requests of the same kind narrow it
    wide = group_acceptance("x", records[:8], seed=7).acceptance_length
    assert wide.high - wide.low > g.acceptance_length.high - g.acceptance_length.low


def test_identical_requests_have_no_spread_and_per_position_comes_from_the_steps():
    records = [record(i, 3, 2, per_step=[2, 1]) for i in range(5)]
    g = group_acceptance("x", records)
    assert (g.acceptance_length.low, g.acceptance_length.value, g.acceptance_length.high) == pytest.approx(
        (2.5, 2.5, 2.5)
    )
    assert [p.value for p in g.per_position] == pytest.approx([1.0, 0.5])


def test_length_buckets():
    assert [length_bucket(n) for n in (None, 0, 128, 129, 512, 2048, 2049, 9000)] == [
        "unknown",
        "0-128",
        "0-128",
        "129-512",
        "129-512",
        "513-2048",
        "2049-8192",
        ">8192",
    ]


def two_categories():
    """coding: every step accepts 3 drafts; writing: none; several requests each, so the intervals are tight."""
    return [record(i, 30, 10, category="coding", tokens=100) for i in range(6)] + [
        record(10 + i, 0, 10, category="writing", tokens=1000) for i in range(6)
    ]


def test_groups_per_category_and_context_length():
    groups = grouped(two_categories())
    assert [(g.group, g.requests, g.acceptance_length.value) for g in groups["by_category"]] == [
        ("coding", 6, 4.0),
        ("writing", 6, 1.0),
    ]
    assert [(g.group, g.requests) for g in groups["by_context_length"]] == [("0-128", 6), ("513-2048", 6)]
    assert groups["overall"].acceptance_length.value == pytest.approx(2.5)


@pytest.mark.parametrize(
    "gate, status, fragment",
    [
        (1.5, "passed", "all prompts AL 2.50 [1.75–3.25] >= 1.5"),  # scalar: the whole set
        (2.0, "inconclusive", "all prompts: AL 2.50 [1.75–3.25] straddles 2.0"),  # its requests disagree
        ({"default": 2.0, "coding": 3.5}, "failed", "writing: AL 1.00 [1.00–1.00] below 2.0"),
        ({"coding": 3.5}, "passed", "coding AL 4.00 [4.00–4.00] >= 3.5"),  # writing not gated
        ({"coding": 4.5}, "failed", "coding: AL 4.00 [4.00–4.00] below 4.5"),
        ({"coding": 2.0, "math": 2.0}, "passed", "no prompts of math (its gate is not judged)"),
    ],
)
def test_per_category_gates(gate, status, fragment):
    recipe = Recipe.model_validate(
        {"name": "x", "model": {"checkpoint": "m"}, "validation": {"min_acceptance_length": gate}}
    )
    groups = grouped(two_categories())
    verdicts, missing = gate_verdicts(recipe.validation.min_acceptance_length, groups["overall"], groups["by_category"])
    got, why = _gate_outcome(verdicts, missing)
    assert got == status and fragment in why, why
    if not isinstance(gate, dict):
        assert [v["group"] for v in verdicts] == [ALL_PROMPTS]


def test_a_gate_the_interval_straddles_is_inconclusive():
    mixed = [record(i, 20 if i % 2 else 0, 10, category="coding") for i in range(4)]
    groups = grouped(mixed)
    iv = groups["overall"].acceptance_length
    assert iv.low < 2.0 < iv.high
    status, why = _gate_outcome(*gate_verdicts({"coding": 2.0}, groups["overall"], groups["by_category"]))
    assert status == "inconclusive" and "coding: AL 2.00" in why and "straddles 2.0" in why


def test_bad_gate_values_are_refused():
    from pydantic import ValidationError

    for bad in ({"coding": 0.5}, {"": 2.0}, {"coding": float("nan")}):
        with pytest.raises(ValidationError):
            Recipe.model_validate(
                {"name": "x", "model": {"checkpoint": "m"}, "validation": {"min_acceptance_length": bad}}
            )


def test_markdown_tables_show_every_group_with_its_interval():
    groups = grouped(two_categories())
    verdicts, missing = gate_verdicts({"default": 2.0}, groups["overall"], groups["by_category"])
    details = {
        "interval": {"confidence": 0.95, "resamples": BOOTSTRAP_RESAMPLES},
        "by_category": [g.to_dict() for g in groups["by_category"]],
        "by_context_length": [g.to_dict() for g in groups["by_context_length"]],
        "gate_verdicts": verdicts,
        "gate_categories_missing": missing,
    }
    text = "\n".join(acceptance_group_lines(details))
    assert "| coding | 6 | 60 | 4.00 [4.00–4.00] | 75.0% [75.0%–75.0%] |" in text
    assert "| writing | 6 | 60 | 1.00 [1.00–1.00] | 0.0% [0.0%–0.0%] |" in text
    assert "| 513-2048 | 6 | 60 | 1.00 [1.00–1.00]" in text
    assert "| writing | 2.0 | 1.00 [1.00–1.00] | failed |" in text
