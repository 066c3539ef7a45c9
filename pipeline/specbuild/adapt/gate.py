"""The gate: old and new head decode the held-out part on the recipe's runtime, paired per record; the new head ships
only when it measurably beats the old one.

- Per group (the whole part, each category): AL of each head pooled per verification step (specbuild.metrics), with
  its percentile bootstrap interval over the requests (validate.aggregate.group_acceptance: the suite's own figure,
  resamples and seed).
- The difference (new - old) AL with a paired percentile bootstrap: one resample of the records serves both heads.
- Ship when the overall difference's 95% interval lies above 0, no gated category's lies wholly below
  -max_category_drop, and the new head's greedy answers are the old one's token for token (lossless: only speed may
  change). Otherwise keep the old head and say why."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from specbuild.adapt.runtimes.base import Decoded
from specbuild.adapt.traffic import Record
from specbuild.facts import metrics
from specbuild.validate.aggregate import BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED, CONFIDENCE, group_acceptance
from specbuild.validate.stats import AcceptanceRecord


def acceptance_records(records: list[Record], decoded: list[Decoded]) -> list[AcceptanceRecord]:
    """The suite's per-request acceptance records of a decode (validate/stats.py), for its aggregates."""
    return [
        AcceptanceRecord(
            prompt_index=i,
            output_tokens=len(d.output_ids),
            accepted_draft_tokens=d.accepted_draft_tokens,
            draft_tokens=d.draft_tokens,
            server_acceptance_rate=None,
            steps=d.steps,
            acceptance_length=metrics.mean_acceptance_length(d.accepted_draft_tokens, d.steps),
            accepted_per_step=list(d.accepted_per_step) or None,
            prompt=r.id,
            steps_from="counters",
            category=r.category,
        )
        for i, (r, d) in enumerate(zip(records, decoded))
    ]


def interval(records: list[AcceptanceRecord]) -> dict:
    """{al, low, high}: pooled AL and its bootstrap interval over the requests."""
    if not records:
        return {"al": None, "low": None, "high": None}
    iv = group_acceptance("all", records).acceptance_length
    return {"al": round(iv.value, 4), "low": round(iv.low, 4), "high": round(iv.high, 4)}


def paired_difference(old: list[Decoded], new: list[Decoded], seed: int = BOOTSTRAP_SEED) -> dict:
    """(new - old) pooled AL over the same records and its paired percentile bootstrap interval."""
    if not old:
        return {"value": None, "low": None, "high": None}
    acc = np.array([[d.accepted_draft_tokens for d in old], [d.accepted_draft_tokens for d in new]], dtype=float)
    steps = np.array([[d.steps for d in old], [d.steps for d in new]], dtype=float)

    def al(a, s):
        return (a + s) / np.where(s > 0, s, np.nan)

    value = float(al(acc[1].sum(), steps[1].sum()) - al(acc[0].sum(), steps[0].sum()))
    picks = np.random.default_rng(seed).integers(0, len(old), size=(BOOTSTRAP_RESAMPLES, len(old)))
    diffs = al(acc[1][picks].sum(1), steps[1][picks].sum(1)) - al(acc[0][picks].sum(1), steps[0][picks].sum(1))
    diffs = diffs[np.isfinite(diffs)]
    tail = (1.0 - CONFIDENCE) / 2 * 100
    low, high = np.percentile(diffs, [tail, 100 - tail]) if diffs.size else (value, value)
    return {"value": round(value, 4), "low": round(float(low), 4), "high": round(float(high), 4)}


@dataclass
class Verdict:
    shipped: bool
    reason: str
    overall: dict
    categories: dict
    lossless: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {
            "shipped": self.shipped,
            "reason": self.reason,
            "overall": self.overall,
            "categories": self.categories,
            "lossless": self.lossless,
        }


def _fmt(d: dict) -> str:
    return f"{d['value']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}]"


def judge(
    records: list[Record],
    old: list[Decoded],
    new: list[Decoded],
    gated: dict[str, bool],
    max_category_drop: float,
    not_trained: str | None = None,
) -> Verdict:
    """The verdict on held-out `records` decoded by the old and the new head. `not_trained`: why no new head was
    made (then `new` is `old` and the gate refuses with that reason)."""
    before, after = acceptance_records(records, old), acceptance_records(records, new)
    overall = {
        "before": interval(before),
        "after": interval(after),
        "difference": paired_difference(old, new),
        "held_out": len(records),
    }
    categories: dict[str, dict] = {}
    for name in gated:
        idx = [i for i, r in enumerate(records) if r.category == name]
        diff = paired_difference([old[i] for i in idx], [new[i] for i in idx])
        categories[name] = {
            "before": interval([before[i] for i in idx]),
            "after": interval([after[i] for i in idx]),
            "difference": diff,
            "held_out": len(idx),
            "gated": bool(gated[name]) and bool(idx),
            "below_drop": bool(gated[name] and idx and diff["high"] < -max_category_drop),
        }
    changed = [r.id for r, o, n in zip(records, old, new) if o.output_ids != n.output_ids]
    lossless = {"records": len(records), "identical": len(records) - len(changed), "differ": changed[:20]}
    if not_trained is not None:
        return Verdict(False, f"not shipped: {not_trained}; the old head is kept", overall, categories, lossless)
    if not records:
        return Verdict(
            False,
            "not shipped: the held-out part is empty (too little traffic to judge the new head); the old head is kept",
            overall,
            categories,
            lossless,
        )
    if changed:
        return Verdict(
            False,
            f"not shipped: the new head changed the greedy answer of {len(changed)} of {len(records)} held-out "
            f"records ({', '.join(changed[:3])}); speculative decoding must only change speed — the old head is "
            "kept (report this: the runtime's verification is not lossless here)",
            overall,
            categories,
            lossless,
        )
    dropped = [c for c, v in categories.items() if v["below_drop"]]
    if dropped:
        worst = categories[dropped[0]]["difference"]
        return Verdict(
            False,
            f"not shipped: category {dropped[0]!r} loses acceptance, (new - old) AL {_fmt(worst)} lies wholly below "
            f"-{max_category_drop:g} (adapt.max_category_drop){' and ' + str(len(dropped) - 1) + ' more' if len(dropped) > 1 else ''}"
            "; the old head is kept",
            overall,
            categories,
            lossless,
        )
    diff = overall["difference"]
    if diff["low"] is None or diff["low"] <= 0:
        return Verdict(
            False,
            f"not shipped: the new head is not measurably better on the {len(records)} held-out records: (new - old) "
            f"AL {_fmt(diff)} (95% paired bootstrap) does not lie above 0; the old head is kept",
            overall,
            categories,
            lossless,
        )
    return Verdict(
        True,
        f"shipped: held-out AL {overall['before']['al']:.3f} -> {overall['after']['al']:.3f}, (new - old) "
        f"{_fmt(diff)} (95% paired bootstrap over {len(records)} records) lies above 0, and no gated category "
        f"lost more than {max_category_drop:g}",
        overall,
        categories,
        lossless,
    )
