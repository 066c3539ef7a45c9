"""Two-sample tests for the sampling check: is the speculative deployment's distribution the baseline's?

`homogeneity_test` is Pearson's chi-square test of homogeneity on a 2 x K table (rows: the two deployments,
columns: observed outcomes, e.g. the first two generated tokens). Every column needs an expected count of at
least 5 in each row (the usual validity condition of the chi-square approximation), so rare outcomes are pooled:
a tuple outcome (t1, t2, ...) is first pooled with the outcomes sharing its prefix (t1, *), then shorter
prefixes, and what is still rare goes into one "other" column. Pooling by prefix keeps the first tokens'
distribution under test when the joint outcomes are too many for the number of trials.
The p-value comes from the chi-square survival function, computed here from the regularised incomplete gamma
function (no scipy). Total variation distance is reported next to it as an effect size.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Hashable, Iterable

OTHER = "(other)"


def _lower_series(a: float, x: float) -> float:
    """P(a, x) by its power series (converges fast for x < a + 1)."""
    term = total = 1.0 / a
    n = a
    for _ in range(10_000):
        n += 1.0
        term *= x / n
        total += term
        if abs(term) < abs(total) * 1e-15:
            break
    return total * math.exp(-x + a * math.log(x) - math.lgamma(a))


def _upper_fraction(a: float, x: float) -> float:
    """Q(a, x) by its continued fraction, evaluated with the modified Lentz method (x >= a + 1)."""
    tiny = 1e-300
    b = x + 1.0 - a
    c = 1.0 / tiny
    d = 1.0 / b
    h = d
    for i in range(1, 10_000):
        an = -i * (i - a)
        b += 2.0
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1.0 / d
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return math.exp(-x + a * math.log(x) - math.lgamma(a)) * h


def regularized_upper_gamma(a: float, x: float) -> float:
    """Q(a, x) = Gamma(a, x) / Gamma(a)."""
    if a <= 0:
        raise ValueError("a must be positive")
    if x <= 0:
        return 1.0
    if x < a + 1.0:
        return max(0.0, 1.0 - _lower_series(a, x))
    return min(1.0, _upper_fraction(a, x))


def chi2_sf(statistic: float, dof: int) -> float:
    """P(X >= statistic) for X ~ chi-square(dof)."""
    if dof <= 0:
        return 1.0
    return regularized_upper_gamma(dof / 2.0, statistic / 2.0)


@dataclass
class HomogeneityResult:
    statistic: float
    dof: int
    p_value: float
    total_variation: float
    columns: list[str]  # outcome labels after pooling
    counts_a: list[int]
    counts_b: list[int]
    pooled_outcomes: int  # distinct outcomes merged into OTHER

    def to_dict(self) -> dict:
        return {
            "statistic": self.statistic,
            "dof": self.dof,
            "p_value": self.p_value,
            "total_variation": self.total_variation,
            "columns": self.columns,
            "counts_a": self.counts_a,
            "counts_b": self.counts_b,
            "pooled_outcomes": self.pooled_outcomes,
        }


def total_variation(a: Counter, b: Counter) -> float:
    na, nb = sum(a.values()), sum(b.values())
    if not na or not nb:
        return 0.0
    return 0.5 * sum(abs(a[k] / na - b[k] / nb) for k in set(a) | set(b))


def _label(outcome: Hashable, depth: int | None) -> str:
    if depth is None or not isinstance(outcome, tuple):
        return str(outcome) if not isinstance(outcome, tuple) else "(" + ", ".join(map(str, outcome)) + ")"
    return "(" + ", ".join(map(str, outcome[:depth])) + ", *)"


def _pool(a: Counter, b: Counter, enough) -> tuple[list[tuple[str, int, int]], int]:
    """Columns (label, count a, count b) after pooling rare outcomes by prefix, then into OTHER."""
    columns: dict[str, list[int]] = {}
    pending = set(a) | set(b)
    pooled = 0
    depths: list[int | None] = [None]
    longest = max((len(o) for o in pending if isinstance(o, tuple)), default=0)
    depths += list(range(longest - 1, 0, -1))
    for depth in depths:
        groups: dict[str, list] = {}
        for o in pending:
            if depth is not None and not (isinstance(o, tuple) and len(o) > depth):
                continue
            groups.setdefault(_label(o, depth), []).append(o)
        for label, members in groups.items():
            ca, cb = sum(a[o] for o in members), sum(b[o] for o in members)
            if enough(ca + cb):
                columns[label] = [ca, cb]
                pending -= set(members)
                pooled += len(members) if depth is not None else 0
    if pending:
        ca, cb = sum(a[o] for o in pending), sum(b[o] for o in pending)
        pooled += len(pending)
        if enough(ca + cb) or not columns:
            columns[OTHER] = [ca, cb]
        else:  # still too small: merge it into the smallest column
            label = min(columns, key=lambda k: sum(columns[k]))
            columns[f"{label} + {OTHER}"] = [columns[label][0] + ca, columns[label][1] + cb]
            del columns[label]
    ordered = sorted(columns.items(), key=lambda kv: (-(kv[1][0] + kv[1][1]), kv[0]))
    return [(k, v[0], v[1]) for k, v in ordered], pooled


def homogeneity_test(
    sample_a: Iterable[Hashable], sample_b: Iterable[Hashable], min_expected: float = 5.0
) -> HomogeneityResult:
    """Chi-square test that two samples of outcomes come from one distribution (pooling rare outcomes)."""
    a, b = Counter(sample_a), Counter(sample_b)
    na, nb = sum(a.values()), sum(b.values())
    if not na or not nb:
        raise ValueError("both samples need at least one outcome")
    n = na + nb
    columns, pooled = _pool(a, b, lambda total: min(na, nb) * total / n >= min_expected)
    statistic = 0.0
    for _, ca, cb in columns:
        total = ca + cb
        for observed, row in ((ca, na), (cb, nb)):
            expected = row * total / n
            if expected > 0:
                statistic += (observed - expected) ** 2 / expected
    dof = len(columns) - 1
    return HomogeneityResult(
        statistic,
        dof,
        chi2_sf(statistic, dof),
        total_variation(a, b),
        [c[0] for c in columns],
        [c[1] for c in columns],
        [c[2] for c in columns],
        pooled,
    )
