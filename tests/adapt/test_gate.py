"""The gate on decodes made up here: ship only when the paired interval of (new - old) AL lies above 0, refuse a
gated category that loses more than max_category_drop, refuse changed answers; every refusal says why."""

from __future__ import annotations

from specbuild.adapt.gate import judge, paired_difference
from specbuild.adapt.runtimes.base import Decoded
from specbuild.adapt.traffic import Record, record_digest


def held(categories: dict[str, int]) -> list[Record]:
    out = []
    for c, n in categories.items():
        out += [Record(f"{c}{i}", c, f"{c}{i}", (1,), record_digest(c, f"{c}{i}")) for i in range(n)]
    return out


def decoded(accepted: int, steps: int = 10, answer=(5, 6, 7)) -> Decoded:
    return Decoded(list(answer), "length", 4 * steps, accepted, steps, [])


def test_a_head_that_accepts_more_on_every_record_ships():
    recs = held({"a": 25, "b": 25})
    old = [decoded(10 + i % 3) for i in range(50)]
    new = [decoded(20 + i % 3) for i in range(50)]
    verdict = judge(recs, old, new, {"a": True, "b": True}, 0.05)
    assert verdict.shipped, verdict.reason
    assert verdict.overall["after"]["al"] > verdict.overall["before"]["al"]
    assert verdict.overall["difference"]["low"] > 0
    assert set(verdict.categories) == {"a", "b"} and all(c["gated"] for c in verdict.categories.values())


def test_the_same_head_does_not_ship_and_says_so():
    recs = held({"a": 30})
    old = [decoded(10 + i % 5) for i in range(30)]
    verdict = judge(recs, old, old, {"a": True}, 0.05)
    assert not verdict.shipped and "not measurably better" in verdict.reason
    assert verdict.overall["difference"] == {"value": 0.0, "low": 0.0, "high": 0.0}


def test_a_gated_category_that_loses_acceptance_blocks_the_ship_and_is_named():
    recs = held({"good": 40, "bad": 25})
    old = [decoded(10) for _ in range(65)]
    new = [decoded(30) for _ in range(40)] + [decoded(2 + i % 2) for i in range(25)]
    verdict = judge(recs, old, new, {"good": True, "bad": True}, 0.05)
    assert not verdict.shipped and "'bad'" in verdict.reason
    assert verdict.categories["bad"]["below_drop"] and not verdict.categories["good"]["below_drop"]


def test_a_small_category_is_reported_but_not_gated():
    recs = held({"good": 40, "small": 5})
    old = [decoded(10) for _ in range(45)]
    new = [decoded(30) for _ in range(40)] + [decoded(1) for _ in range(5)]
    verdict = judge(recs, old, new, {"good": True, "small": False}, 0.05)
    assert verdict.shipped, verdict.reason
    assert verdict.categories["small"]["gated"] is False
    assert verdict.categories["small"]["after"]["al"] < verdict.categories["small"]["before"]["al"]


def test_changed_answers_never_ship():
    recs = held({"a": 30})
    old = [decoded(10) for _ in range(30)]
    new = [decoded(30) for _ in range(29)] + [decoded(30, answer=(5, 6, 8))]
    verdict = judge(recs, old, new, {"a": True}, 0.05)
    assert not verdict.shipped and "changed the greedy answer" in verdict.reason
    assert verdict.lossless == {"records": 30, "identical": 29, "differ": ["a29"]}


def test_no_training_is_the_reason_given():
    recs = held({"a": 30})
    old = [decoded(10) for _ in range(30)]
    verdict = judge(recs, old, old, {"a": True}, 0.05, not_trained="adapt.max_steps is 0")
    assert not verdict.shipped and "adapt.max_steps is 0" in verdict.reason


def test_the_paired_interval_is_narrower_than_the_two_unpaired_ones_when_records_vary_together():
    # records differ a lot from each other, the new head adds the same to each: pairing removes that variation
    old = [decoded(a) for a in range(0, 40, 2)]
    new = [decoded(a + 3) for a in range(0, 40, 2)]
    diff = paired_difference(old, new)
    assert diff["low"] > 0 and diff["high"] - diff["low"] < 0.5
