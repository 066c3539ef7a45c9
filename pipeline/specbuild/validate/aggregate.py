"""Aggregation (the second piece: stats -> aggregate -> report): distributions, sweep levels, speedup, crossover,
acceptance over a prompt set."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from specbuild.facts import metrics
from specbuild.validate.stats import AcceptanceRecord, RequestRecord

PERCENTILES = (50, 90, 99)


def distribution(values: Sequence[float]) -> dict[str, float] | None:
    """avg, min, max and p50/p90/p99 (linear interpolation); None for no values."""
    if not len(values):
        return None
    arr = np.asarray(values, dtype=float)
    out = {"n": int(arr.size), "avg": float(arr.mean()), "min": float(arr.min()), "max": float(arr.max())}
    for p in PERCENTILES:
        out[f"p{p}"] = float(np.percentile(arr, p))
    return out


@dataclass
class LevelSummary:
    """One deployment at one concurrency level of the sweep."""

    deployment: str
    concurrency: int
    requests: int
    errors: int
    wall_s: float
    output_tokens: int
    output_tokens_per_s: float
    requests_per_s: float
    ttft_s: dict | None
    itl_s: dict | None
    latency_s: dict | None
    user_tokens_per_s: dict | None
    streamed: bool
    first_error: str | None = None

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def wall_time(records: Sequence[RequestRecord]) -> float:
    """First request sent -> last response, of one closed-loop batch of requests."""
    return (max(r.end for r in records) - min(r.start for r in records)) if records else 0.0


def tokens_per_s(records: Sequence[RequestRecord]) -> float:
    wall = wall_time(records)
    return sum(r.output_tokens for r in records if r.ok) / wall if wall > 0 else 0.0


def summarize_level(
    records: Sequence[RequestRecord], deployment: str, concurrency: int, wall_s: float | None = None
) -> LevelSummary:
    """wall_s: the level's wall time when its requests ran in several rounds (the sum of the rounds' walls);
    default first request -> last response."""
    ok = [r for r in records if r.ok]
    errors = [r for r in records if not r.ok]
    wall = wall_time(records) if wall_s is None else wall_s
    tokens = sum(r.output_tokens for r in ok)
    user = [u for u in (r.user_tokens_per_s for r in ok) if u is not None]
    return LevelSummary(
        deployment=deployment,
        concurrency=concurrency,
        requests=len(records),
        errors=len(errors),
        wall_s=wall,
        output_tokens=tokens,
        output_tokens_per_s=tokens / wall if wall > 0 else 0.0,
        requests_per_s=len(ok) / wall if wall > 0 else 0.0,
        ttft_s=distribution([r.ttft_s for r in ok if r.ttft_s is not None]),
        itl_s=distribution([v for r in ok for v in r.itl_s]),
        latency_s=distribution([r.latency_s for r in ok]),
        user_tokens_per_s=distribution(user),
        streamed=any(r.streamed for r in ok),
        first_error=errors[0].error if errors else None,
    )


@dataclass
class Speedup:
    """Speculative / baseline output tokens per second at one concurrency level. With `rounds` (one ratio per
    round of the sweep, the two deployments taking turns) the value is their median and `low`/`high` their
    spread; without, the ratio of the level's totals."""

    concurrency: int
    speculative_tokens_per_s: float
    baseline_tokens_per_s: float
    rounds: list[float] = field(default_factory=list)

    @property
    def value(self) -> float | None:
        if self.rounds:
            return float(np.median(self.rounds))
        if self.baseline_tokens_per_s <= 0:
            return None
        return self.speculative_tokens_per_s / self.baseline_tokens_per_s

    @property
    def low(self) -> float | None:
        return min(self.rounds) if self.rounds else self.value

    @property
    def high(self) -> float | None:
        return max(self.rounds) if self.rounds else self.value

    def straddles(self, threshold: float) -> bool:
        """The rounds disagree about being at least `threshold`."""
        return self.low is not None and self.low < threshold <= self.high

    def to_dict(self) -> dict:
        return {
            "concurrency": self.concurrency,
            "speculative_tokens_per_s": self.speculative_tokens_per_s,
            "baseline_tokens_per_s": self.baseline_tokens_per_s,
            "speedup": self.value,
            "speedup_min": self.low,
            "speedup_max": self.high,
            "rounds": list(self.rounds),
        }


def round_speedups(concurrency: int, speculative: Sequence[float], baseline: Sequence[float]) -> Speedup:
    """One level's speedup from each round's tokens/s of both deployments (rounds where the baseline made no
    tokens are left out)."""
    ratios = [a / b for a, b in zip(speculative, baseline) if b > 0]
    return Speedup(
        concurrency,
        float(np.mean(speculative)) if len(speculative) else 0.0,
        float(np.mean(baseline)) if len(baseline) else 0.0,
        ratios,
    )


def speedups(speculative: Sequence[LevelSummary], baseline: Sequence[LevelSummary]) -> list[Speedup]:
    """Output-token throughput ratio at every concurrency level both deployments ran."""
    base = {s.concurrency: s for s in baseline}
    return [
        Speedup(s.concurrency, s.output_tokens_per_s, base[s.concurrency].output_tokens_per_s)
        for s in sorted(speculative, key=lambda s: s.concurrency)
        if s.concurrency in base
    ]


@dataclass
class Crossover:
    """Where speculation stops paying: the first sweep level with speedup < 1, and the concurrency where the
    speedup line crosses 1 (interpolated linearly in log2(concurrency) between the two levels around it; only
    where speculation is faster before it). `slower_levels` / `faster_levels`: the levels below 1 and at or
    above it (medians), which say where it is slower and where faster whatever the shape of the line."""

    first_level_below_1: int | None
    interpolated: float | None
    always_faster: bool
    never_faster: bool
    uncertain_levels: list[int] = field(default_factory=list)  # levels whose rounds disagree about speedup >= 1
    slower_levels: list[int] = field(default_factory=list)
    faster_levels: list[int] = field(default_factory=list)

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def crossover(points: Sequence[Speedup]) -> Crossover:
    """From each level's median speedup; levels whose rounds straddle 1 are listed as uncertain."""
    pts = [(p.concurrency, p.value) for p in points if p.value is not None]
    uncertain = [p.concurrency for p in points if p.value is not None and p.straddles(1.0)]
    slower = [c for c, v in pts if v < 1.0]
    faster = [c for c, v in pts if v >= 1.0]
    if not pts:
        return Crossover(None, None, False, False)
    if all(v >= 1.0 for _, v in pts):
        return Crossover(None, None, True, False, uncertain, slower, faster)
    if pts[0][1] < 1.0:
        return Crossover(pts[0][0], None, False, all(v < 1.0 for _, v in pts), uncertain, slower, faster)
    for (c0, v0), (c1, v1) in zip(pts, pts[1:]):
        if v0 >= 1.0 > v1:
            x0, x1 = math.log2(c0), math.log2(c1)
            x = x0 + (v0 - 1.0) / (v0 - v1) * (x1 - x0)
            return Crossover(c1, 2.0**x, False, False, uncertain, slower, faster)
    raise AssertionError("unreachable: some level is below 1")


@dataclass
class AcceptanceSummary:
    """Acceptance over a greedy prompt set. `mean_acceptance_length` pools every step of every request
    (vLLM's convention: AL = 1 + accepted / steps); the per-request figures show the spread. Per-position
    acceptance and the histogram pool the steps of the requests whose stream gave them (`per_position_requests`
    of `requests`), over positions 1..the deepest a step can accept."""

    requests: int
    accepted_draft_tokens: int
    draft_tokens: int
    steps: int
    mean_acceptance_length: float
    acceptance_rate: float
    per_request_acceptance_length: dict | None
    per_request_acceptance_rate: dict | None
    per_position: list[float] | None = None  # position i (1-based, index i-1): share of steps accepting >= i drafts
    histogram: list[int] | None = None  # steps by number of accepted drafts (0, 1, ..., positions)
    per_position_requests: int = 0  # the requests whose steps per_position and histogram pool
    records: list[dict] = field(default_factory=list)

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def stepped(records: Sequence[AcceptanceRecord]) -> list[AcceptanceRecord]:
    """The records that carry per-step sizes (their stream gave them)."""
    return [r for r in records if r.accepted_per_step is not None]


def positions_of(records: Sequence[AcceptanceRecord], positions: int | None = None) -> int:
    """The draft positions per-position acceptance covers: `positions` (the deepest a step of the deployment can
    accept: Speculation.accept_depth), or deeper where a record's step accepted more; without it, the deepest
    step seen."""
    return max([positions or 0, *(n for r in records for n in r.accepted_per_step or ())])


def summarize_acceptance(records: Sequence[AcceptanceRecord], positions: int | None = None) -> AcceptanceSummary:
    accepted = sum(r.accepted_draft_tokens for r in records)
    drafted = sum(r.draft_tokens for r in records)
    steps = sum(r.steps for r in records)
    with_steps = stepped(records)
    per_step = [n for r in with_steps for n in r.accepted_per_step or ()]
    histogram = per_position = None
    if per_step:
        depth = positions_of(with_steps, positions)
        histogram = [0] * (depth + 1)
        for n in per_step:
            histogram[n] += 1
        per_position = [sum(histogram[i:]) / len(per_step) for i in range(1, depth + 1)]
    return AcceptanceSummary(
        requests=len(records),
        accepted_draft_tokens=accepted,
        draft_tokens=drafted,
        steps=steps,
        mean_acceptance_length=metrics.mean_acceptance_length(accepted, steps),
        acceptance_rate=metrics.acceptance_rate(accepted, drafted),
        per_request_acceptance_length=distribution([r.acceptance_length for r in records]),
        per_request_acceptance_rate=distribution(
            [metrics.acceptance_rate(r.accepted_draft_tokens, r.draft_tokens) for r in records]
        ),
        per_position=per_position,
        histogram=histogram,
        per_position_requests=len(with_steps) if per_step else 0,
        records=[r.to_dict() for r in records],
    )


# -- acceptance per group (category, context length) with bootstrap intervals over requests -------------------

BOOTSTRAP_RESAMPLES = 2000
CONFIDENCE = 0.95
BOOTSTRAP_SEED = 20240601  # fixed: the same records give the same intervals, run after run
# context-length buckets (prompt tokens as sent): upper bounds, inclusive
LENGTH_BUCKETS = (128, 512, 2048, 8192)


def length_bucket(tokens: int | None) -> str:
    """The context-length bucket of a prompt of `tokens` tokens ("unknown" without a tokenizer)."""
    if tokens is None:
        return "unknown"
    low = 0
    for high in LENGTH_BUCKETS:
        if tokens <= high:
            return f"{low + 1 if low else 0}-{high}"
        low = high
    return f">{LENGTH_BUCKETS[-1]}"


@dataclass
class Interval:
    """A point estimate and its percentile bootstrap interval (CONFIDENCE) over requests."""

    value: float
    low: float
    high: float

    def to_dict(self) -> dict:
        return {"value": self.value, "low": self.low, "high": self.high}


def _pooled_interval(num: np.ndarray, den: np.ndarray, picks: np.ndarray, statistic) -> Interval | None:
    """statistic(sum(num), sum(den)) pooled over the requests, and its interval over the resampled requests
    (`picks`: resamples x requests indices); None when sum(den) is 0. A resample whose den sums to 0 is left out."""
    if den.sum() <= 0:
        return None
    value = float(statistic(num.sum(), den.sum()))
    sums = zip(num[picks].sum(axis=1).tolist(), den[picks].sum(axis=1).tolist())
    boot = [statistic(n, d) for n, d in sums if d > 0]
    tail = (1.0 - CONFIDENCE) / 2 * 100
    low, high = np.percentile(boot, [tail, 100 - tail]) if boot else (value, value)
    return Interval(value, float(low), float(high))


def _share(n: float, d: float) -> float:
    return n / d


@dataclass
class GroupAcceptance:
    """Acceptance of one group of requests (a category or a context-length bucket): AL (bonus token included,
    pooled per verification step: specbuild.facts.metrics' definition), acceptance rate and per-position
    acceptance, each with its bootstrap interval over the group's requests. Per-position acceptance pools the
    steps of the group's requests that carry them (`per_position_requests`); None when none does."""

    group: str
    requests: int
    steps: int
    draft_tokens: int
    accepted_draft_tokens: int
    acceptance_length: Interval
    acceptance_rate: Interval | None
    per_position: list[Interval] | None
    per_position_requests: int = 0

    def to_dict(self) -> dict:
        return {
            "group": self.group,
            "requests": self.requests,
            "steps": self.steps,
            "draft_tokens": self.draft_tokens,
            "accepted_draft_tokens": self.accepted_draft_tokens,
            "acceptance_length": self.acceptance_length.to_dict(),
            "acceptance_rate": self.acceptance_rate.to_dict() if self.acceptance_rate else None,
            "per_position": [p.to_dict() for p in self.per_position] if self.per_position else None,
            "per_position_requests": self.per_position_requests,
        }


def _per_position(records: Sequence[AcceptanceRecord], depth: int, seed: int) -> list[Interval] | None:
    """Share of steps accepting at least i drafts, i = 1..depth, pooled over the records' steps, each with its
    bootstrap interval over those records; None when none carries steps."""
    with_steps = [r for r in stepped(records) if r.accepted_per_step]
    if not with_steps or depth <= 0:
        return None
    # per request: how many of its steps accepted at least i drafts, i = 1..depth
    reached = np.array(
        [[sum(1 for n in r.accepted_per_step or () if n >= i) for i in range(1, depth + 1)] for r in with_steps],
        dtype=float,
    ).reshape(len(with_steps), depth)
    counted = np.array([len(r.accepted_per_step or ()) for r in with_steps], dtype=float)
    picks = np.random.default_rng(seed).integers(0, len(with_steps), size=(BOOTSTRAP_RESAMPLES, len(with_steps)))
    found = [_pooled_interval(reached[:, i], counted, picks, _share) for i in range(depth)]
    return [p for p in found if p is not None] or None


def group_acceptance(
    group: str, records: Sequence[AcceptanceRecord], seed: int = BOOTSTRAP_SEED, depth: int | None = None
) -> GroupAcceptance:
    """The group's pooled figures and intervals, from BOOTSTRAP_RESAMPLES resamples of its requests. `depth`:
    the draft positions to report (positions_of: give the deployment's, so that every group shows the same
    positions, zeros where no step reached one)."""
    accepted = np.array([r.accepted_draft_tokens for r in records], dtype=float)
    steps = np.array([r.steps for r in records], dtype=float)
    drafted = np.array([r.draft_tokens for r in records], dtype=float)
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(records), size=(BOOTSTRAP_RESAMPLES, len(records)))
    al = _pooled_interval(accepted, steps, picks, metrics.mean_acceptance_length)
    per_position = _per_position(records, positions_of(records, depth), seed)
    return GroupAcceptance(
        group,
        len(records),
        int(steps.sum()),
        int(drafted.sum()),
        int(accepted.sum()),
        al or Interval(0.0, 0.0, 0.0),
        _pooled_interval(accepted, drafted, picks, metrics.acceptance_rate),
        per_position,
        len([r for r in stepped(records) if r.accepted_per_step]) if per_position else 0,
    )


def acceptance_by(records: Sequence[AcceptanceRecord], key, depth: int | None = None) -> list[GroupAcceptance]:
    """GroupAcceptance per value of key(record), in order of first appearance, over the same draft positions
    (positions_of the whole set)."""
    groups: dict[str, list[AcceptanceRecord]] = {}
    for r in records:
        groups.setdefault(key(r), []).append(r)
    depth = positions_of(records, depth)
    return [group_acceptance(name, members, depth=depth) for name, members in groups.items()]
