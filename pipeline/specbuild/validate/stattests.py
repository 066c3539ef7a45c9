"""Two-sample tests for the sampling check: is the speculative deployment's distribution the baseline's?

`homogeneity_test` is Pearson's chi-square test of homogeneity on a 2 x K table (rows: the two deployments,
columns: observed outcomes, e.g. the first two generated tokens). Outcomes whose expected count is below 5 in
either row are pooled into one "other" column, the usual validity condition of the chi-square approximation.
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
        return {"statistic": self.statistic, "dof": self.dof, "p_value": self.p_value,
                "total_variation": self.total_variation, "columns": self.columns, "counts_a": self.counts_a,
                "counts_b": self.counts_b, "pooled_outcomes": self.pooled_outcomes}


def total_variation(a: Counter, b: Counter) -> float:
    na, nb = sum(a.values()), sum(b.values())
    if not na or not nb:
        return 0.0
    return 0.5 * sum(abs(a[k] / na - b[k] / nb) for k in set(a) | set(b))


def homogeneity_test(sample_a: Iterable[Hashable], sample_b: Iterable[Hashable],
                     min_expected: float = 5.0) -> HomogeneityResult:
    """Chi-square test that two samples of outcomes come from one distribution (pooling rare outcomes)."""
    a, b = Counter(sample_a), Counter(sample_b)
    na, nb = sum(a.values()), sum(b.values())
    if not na or not nb:
        raise ValueError("both samples need at least one outcome")
    n = na + nb
    outcomes = sorted(set(a) | set(b), key=lambda k: (-(a[k] + b[k]), str(k)))

    def expected_ok(col_total: int) -> bool:
        return min(na, nb) * col_total / n >= min_expected

    kept = [k for k in outcomes if expected_ok(a[k] + b[k])]
    rare = [k for k in outcomes if k not in kept]
    columns: list[tuple[str, int, int]] = [(str(k), a[k], b[k]) for k in kept]
    if rare:
        other = (OTHER, sum(a[k] for k in rare), sum(b[k] for k in rare))
        if expected_ok(other[1] + other[2]) or not columns:
            columns.append(other)
        else:  # the pooled column is still too small: merge it into the smallest kept column
            label, ca, cb = columns.pop()
            columns.append((f"{label} + {OTHER}", ca + other[1], cb + other[2]))
    statistic = 0.0
    for _, ca, cb in columns:
        total = ca + cb
        for observed, row in ((ca, na), (cb, nb)):
            expected = row * total / n
            if expected > 0:
                statistic += (observed - expected) ** 2 / expected
    dof = len(columns) - 1
    return HomogeneityResult(statistic, dof, chi2_sf(statistic, dof), total_variation(a, b),
                             [c[0] for c in columns], [c[1] for c in columns], [c[2] for c in columns], len(rare))
