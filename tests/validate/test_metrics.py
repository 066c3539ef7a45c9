"""Per-request stats, aggregation and the statistical test, on hand-made inputs whose answers are worked out
here by hand (or from published chi-square tables)."""

from __future__ import annotations

import numpy as np
import pytest

from specbuild.validate.aggregate import (
    LevelSummary,
    Speedup,
    crossover,
    distribution,
    speedups,
    summarize_acceptance,
    summarize_level,
)
from specbuild.validate.client import Chunk, Generation
from specbuild.validate.stats import AcceptanceRecord, RequestRecord
from specbuild.validate.stattests import OTHER, chi2_sf, homogeneity_test, total_variation


# --- chi-square ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "x, dof, p",
    [  # critical values from standard chi-square tables
        (3.841, 1, 0.05),
        (6.635, 1, 0.01),
        (10.828, 1, 0.001),
        (5.991, 2, 0.05),
        (18.307, 10, 0.05),
        (29.588, 10, 0.001),
        (124.342, 100, 0.05),
        (0.0158, 1, 0.90),
        (4.865, 10, 0.90),
    ],
)
def test_chi2_survival_matches_tables(x, dof, p):
    assert chi2_sf(x, dof) == pytest.approx(p, rel=2e-3)


def test_chi2_survival_edge_cases():
    assert chi2_sf(0.0, 3) == 1.0
    assert chi2_sf(5.0, 0) == 1.0
    # dof 2 has the closed form exp(-x/2)
    for x in (0.5, 2.0, 9.0, 40.0):
        assert chi2_sf(x, 2) == pytest.approx(np.exp(-x / 2), rel=1e-9)


def test_homogeneity_2x2_by_hand():
    # 80/20 vs 50/50: chi2 = n (ad - bc)^2 / (r1 r2 c1 c2) = 200 * (80*50 - 20*50)^2 / (100*100*130*70)
    r = homogeneity_test(["x"] * 80 + ["y"] * 20, ["x"] * 50 + ["y"] * 50)
    assert r.statistic == pytest.approx(200 * 3000**2 / (100 * 100 * 130 * 70))
    assert r.dof == 1 and r.p_value < 1e-4
    assert r.total_variation == pytest.approx(0.3)


def test_identical_samples_give_p_one():
    r = homogeneity_test([1, 2, 3] * 30, [1, 2, 3] * 30)
    assert r.statistic == 0.0 and r.p_value == 1.0


def test_too_small_other_merges_into_the_smallest_column():
    r = homogeneity_test(["a"] * 40 + ["b"] * 20 + ["z"], ["a"] * 40 + ["b"] * 20 + ["y"])
    assert r.columns == ["a", f"b + {OTHER}"] and r.counts_a == [40, 21]


def test_rare_outcomes_pool_by_prefix_then_other():
    # (1, k) for many k: each rare, together common -> pooled as "(1, *)"; (7, *) and (8, *) are rare even as
    # prefixes (expected count 3 < 5) and go to OTHER (expected 6)
    a = [(0, 0)] * 40 + [(1, k) for k in range(30)] + [(7, 0)] * 3 + [(8, 0)] * 3
    b = [(0, 0)] * 40 + [(1, k + 100) for k in range(30)] + [(7, 1)] * 3 + [(8, 1)] * 3
    r = homogeneity_test(a, b)
    assert "(0, 0)" in r.columns and "(1, *)" in r.columns
    assert OTHER in r.columns and r.counts_a[r.columns.index(OTHER)] == 6
    i = r.columns.index("(1, *)")
    assert r.counts_a[i] == 30 and r.counts_b[i] == 30
    assert r.p_value > 0.5  # same shape once pooled


def test_the_test_has_power_and_controls_false_alarms():
    rng = np.random.default_rng(1234)
    p = np.array([0.4, 0.25, 0.15, 0.1, 0.05, 0.05])
    q = np.array([0.55, 0.2, 0.1, 0.07, 0.04, 0.04])  # total variation 0.15
    same = [homogeneity_test(rng.choice(6, 200, p=p), rng.choice(6, 200, p=p)).p_value for _ in range(200)]
    diff = [homogeneity_test(rng.choice(6, 600, p=q), rng.choice(6, 600, p=p)).p_value for _ in range(50)]
    assert np.mean(np.array(same) < 0.01) < 0.03  # about 1 % by construction
    assert np.mean(np.array(diff) < 0.01) > 0.8


def test_total_variation():
    from collections import Counter

    assert total_variation(Counter("aab"), Counter("abb")) == pytest.approx(1 / 3)


# --- per-request stats -----------------------------------------------------------------------------------------


def gen_with_chunks(start: float, chunks: list[tuple[float, list[int]]], perf=None) -> Generation:
    g = Generation("http-stream", start, end=chunks[-1][0], final=True)
    for t, ids in chunks:
        g.chunks.append(Chunk(t, "x" * len(ids), ids))
        g.ids = (g.ids or []) + ids
    g.perf = perf or {}
    return g


def test_request_record_normalises_itl_per_token():
    # sent at 10.0; responses of 1, 3 and 2 tokens at 10.1, 10.4, 10.6
    g = gen_with_chunks(10.0, [(10.1, [5]), (10.4, [6, 7, 8]), (10.6, [9, 10])])
    r = RequestRecord.from_generation(g, "speculative", 1, 0)
    assert r.ttft_s == pytest.approx(0.1)
    assert r.itl_s == pytest.approx([0.1, 0.1, 0.1, 0.1, 0.1])  # 0.3 / 3 three times, 0.2 / 2 twice
    assert r.latency_s == pytest.approx(0.6)
    assert r.output_tokens == 6
    assert r.user_tokens_per_s == pytest.approx(5 / 0.5)


def test_failed_request_record():
    g = Generation("http", 1.0, end=2.0, error="boom")
    r = RequestRecord.from_generation(g, "baseline", 2, 3)
    assert not r.ok and r.output_tokens == 0 and r.ttft_s is None


def test_acceptance_from_counters_and_from_the_stream():
    perf = {"total_accepted_draft_tokens": 6.0, "total_draft_tokens": 12.0, "acceptance_rate": 0.5}
    plain = Generation("http", 0.0, end=1.0, ids=list(range(10)), perf=perf, final=True)
    # counters only: the prefill's token comes from no verification: steps = 10 - 6 - 1 = 3
    rec = AcceptanceRecord.from_generation(plain, 0)
    assert rec.steps == 3 and rec.acceptance_length == pytest.approx(1 + 6 / 3)
    # external drafts (BLS): the prefill is a step
    rec = AcceptanceRecord.from_generation(plain, 0, prefill_is_step=True)
    assert rec.steps == 4
    # streamed: prefill 1 token, then steps of 4, 1, 4 tokens -> accepted 3, 0, 3
    stream = gen_with_chunks(0.0, [(0.1, [0]), (0.2, [1, 2, 3, 4]), (0.3, [5]), (0.4, [6, 7, 8, 9])])
    rec = AcceptanceRecord.from_generation(plain, 0, stream)
    assert rec.accepted_per_step == [3, 0, 3] and rec.steps == 3
    # the same tokens streamed by a run whose own counters accepted 5 drafts, not the counted request's 6 (drafting
    # differed between the two runs): AL's steps are the counted request's (the counters'), while the streamed
    # run's own steps still give per-position acceptance
    drafted_otherwise = gen_with_chunks(
        0.0,
        [(0.1, [0]), (0.2, [1, 2, 3, 4]), (0.3, [5]), (0.4, [6, 7]), (0.5, [8, 9])],
        perf={"total_accepted_draft_tokens": 5.0, "total_draft_tokens": 16.0},
    )
    rec = AcceptanceRecord.from_generation(plain, 0, drafted_otherwise)
    assert rec.steps == 3 and rec.steps_from == "counters"
    assert rec.accepted_per_step == [3, 0, 1, 1] and "drafted otherwise" in rec.per_step_note
    agreeing = gen_with_chunks(0.0, [(0.1, [0]), (0.2, [1, 2, 3, 4]), (0.3, [5]), (0.4, [6, 7, 8, 9])], perf=dict(perf))
    assert AcceptanceRecord.from_generation(plain, 0, agreeing).accepted_per_step == [3, 0, 3]  # its counters agree
    # a stream with other tokens is not used
    other = gen_with_chunks(0.0, [(0.1, [0]), (0.2, [1, 2, 3, 4, 5, 6, 7, 8, 99])])
    assert AcceptanceRecord.from_generation(plain, 0, other).accepted_per_step is None
    # no counters: nothing to say
    assert AcceptanceRecord.from_generation(Generation("http", 0.0, ids=[1]), 0) is None


def test_bls_rounds_are_not_steps():
    """The BLS (draft-target, prompt lookup) streams one response per round, and a round asking for K + 1 = 5
    tokens whose target rejected drafts decodes on alone: rounds of 5 tokens that accepted 1, 0 and 4 drafts
    took 4, 5 and 1 target forwards. The stream (3 responses) is not the steps; the counters are:
    15 tokens - 5 accepted = 10 (the prefill verifies the first round's drafts), and the server's BLS counts the
    same (tensorrt_llm_bls/bls_drafting.py)."""
    import importlib.util

    from specbuild.repository.engine.writer import SOURCES

    spec = importlib.util.spec_from_file_location("bls_drafting", SOURCES / "tensorrt_llm_bls" / "bls_drafting.py")
    drafting = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(drafting)

    rounds = [(1, 5), (0, 5), (4, 5)]  # (accepted, tokens the round's target call returned)
    perf = {"total_accepted_draft_tokens": 5.0, "total_draft_tokens": 12.0, "acceptance_rate": 5 / 12}
    plain = Generation("http", 0.0, end=1.0, ids=list(range(15)), perf=perf, final=True)
    stream = gen_with_chunks(0.0, [(0.1, [0, 1, 2, 3, 4]), (0.2, [5, 6, 7, 8, 9]), (0.3, [10, 11, 12, 13, 14])])
    rec = AcceptanceRecord.from_generation(plain, 0, stream, prefill_is_step=True, stream_per_step=False)
    server_steps = sum(1 + drafting.plain_steps_after_verification(a, n) for a, n in rounds)
    assert rec.steps == server_steps == 10 and rec.steps_from == "counters" and rec.accepted_per_step is None
    assert rec.acceptance_length == pytest.approx(1 + 5 / 10)
    # read as a stream meant to carry one response per step, its responses do not add up to its counters (12
    # drafts beyond one token per response, 5 accepted): not read as 3 steps, the counters' steps stand
    misread = AcceptanceRecord.from_generation(plain, 0, stream, prefill_is_step=True)
    assert misread.steps == 10 and misread.accepted_per_step is None and "its counters 5" in misread.per_step_note
    # a round cut short by the end id or a stop word returned fewer tokens than the accepted drafts + 1
    assert drafting.plain_steps_after_verification(2, 2) == 0


def test_acceptance_summary_pools_steps_and_derives_positions():
    recs = [AcceptanceRecord(0, 10, 6, 12, 0.5, 3, 3.0, [3, 0, 3]), AcceptanceRecord(1, 5, 1, 8, 0.125, 2, 1.5, [1, 0])]
    s = summarize_acceptance(recs)
    assert s.accepted_draft_tokens == 7 and s.draft_tokens == 20 and s.steps == 5
    assert s.mean_acceptance_length == pytest.approx(1 + 7 / 5)
    assert s.acceptance_rate == pytest.approx(7 / 20)
    assert s.histogram == [2, 1, 0, 2]  # accepted per step: 3, 0, 3, 1, 0
    assert s.per_position == pytest.approx([3 / 5, 2 / 5, 2 / 5])
    assert s.per_request_acceptance_length["min"] == 1.5 and s.per_request_acceptance_length["max"] == 3.0


# --- aggregation -----------------------------------------------------------------------------------------------


def test_distribution():
    d = distribution([1.0, 2.0, 3.0, 4.0, 5.0])
    assert d["avg"] == 3.0 and d["min"] == 1.0 and d["max"] == 5.0 and d["p50"] == 3.0
    assert d["p90"] == pytest.approx(4.6) and d["p99"] == pytest.approx(4.96)
    assert distribution([]) is None


def test_level_summary_throughput():
    recs = []
    for i in range(4):  # four requests of 10 tokens between t=0 and t=2
        g = gen_with_chunks(i * 0.5, [(i * 0.5 + 0.1, [1] * 5), (i * 0.5 + 0.5, [1] * 5)])
        recs.append(RequestRecord.from_generation(g, "speculative", 2, i))
    recs.append(RequestRecord.from_generation(Generation("http", 0.2, end=0.3, error="x"), "speculative", 2, 4))
    s = summarize_level(recs, "speculative", 2)
    assert s.requests == 5 and s.errors == 1 and s.first_error == "x"
    assert s.wall_s == pytest.approx(2.0)
    assert s.output_tokens == 40 and s.output_tokens_per_s == pytest.approx(20.0)
    assert s.requests_per_s == pytest.approx(2.0)
    assert s.ttft_s["p50"] == pytest.approx(0.1) and s.itl_s["p50"] == pytest.approx(0.4 / 5)


def _level(dep: str, c: int, tps: float) -> LevelSummary:
    return LevelSummary(dep, c, 1, 0, 1.0, int(tps), tps, 1.0, None, None, None, None, True)


def test_speedups_and_crossover():
    spec = [_level("speculative", c, t) for c, t in ((1, 200), (2, 300), (4, 360), (8, 400))]
    base = [_level("baseline", c, t) for c, t in ((1, 100), (2, 180), (4, 400), (8, 640))]
    sp = speedups(spec, base)
    assert [round(p.value, 3) for p in sp] == [2.0, round(300 / 180, 3), 0.9, 0.625]
    cross = crossover(sp)
    assert cross.first_level_below_1 == 4 and not cross.always_faster
    # linear in log2(c) between (1, 5/3) at c=2 and (2, 0.9) at c=4: 1 + (2/3) / (5/3 - 0.9)
    x = 1 + (300 / 180 - 1) / (300 / 180 - 0.9)
    assert cross.interpolated == pytest.approx(2**x)


def test_crossover_edge_cases():
    fast = [Speedup(1, 2.0, 1.0), Speedup(2, 1.5, 1.0)]
    assert crossover(fast).always_faster and crossover(fast).first_level_below_1 is None
    slow = [Speedup(1, 0.5, 1.0), Speedup(2, 0.4, 1.0)]
    c = crossover(slow)
    assert c.never_faster and c.first_level_below_1 == 1 and c.interpolated is None
    assert crossover([]).first_level_below_1 is None
    assert Speedup(1, 1.0, 0.0).value is None
