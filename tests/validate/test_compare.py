"""The comparison with an earlier report (validate --against) on reports made here: paired bootstrap of the AL
change per category, the tolerance judged on the interval, speed judged only when the rounds agree, the build
identity's changes, and the earlier report's own errors."""

from __future__ import annotations

import json

import pytest

from specbuild.errors import UserError
from specbuild.recipe.schema import Recipe
from specbuild.validate.compare import (
    against_checks,
    build_identity,
    identity_changes,
    judge_drop,
    load_report,
    relative_change,
)

RECIPE = Recipe.model_validate({"name": "x", "model": {"checkpoint": "m"}})


def rec(prompt, category, accepted, steps):
    return {"prompt": prompt, "category": category, "accepted_draft_tokens": accepted, "steps": steps}


def report(records, speedup=None) -> dict:
    checks = [{"name": "acceptance", "details": {"records": records}}]
    if speedup is not None:
        checks.append({"name": "performance", "details": {"speedup": speedup}})
    return {"specbuild_validation_report": 1, "recipe": "x", "checks": checks}


def point(c, rounds):
    return {
        "concurrency": c,
        "speedup": sorted(rounds)[len(rounds) // 2],
        "speedup_min": min(rounds),
        "speedup_max": max(rounds),
        "rounds": rounds,
    }


GOOD = [rec(f"c{i}", "coding", 20 + i, 10) for i in range(6)] + [rec(f"w{i}", "writing", 15 - i, 10) for i in range(6)]


def test_the_same_records_twice_change_by_exactly_nothing():
    old = {r["prompt"]: r for r in GOOD if r["category"] == "coding"}
    d = relative_change(old, dict(old))
    assert d["change"] == {"value": 0.0, "low": 0.0, "high": 0.0} and d["paired_prompts"] == 6
    checks = against_checks(report(GOOD), report(GOOD), RECIPE)
    assert [(c.name, c.status) for c in checks] == [
        ("against:acceptance:coding", "passed"),
        ("against:acceptance:writing", "passed"),
    ]


def test_a_weaker_category_fails_and_the_others_pass():
    weak = [
        dict(r, accepted_draft_tokens=r["accepted_draft_tokens"] // 2) if r["category"] == "coding" else r for r in GOOD
    ]
    checks = {c.name: c for c in against_checks(report(GOOD), report(weak), RECIPE)}
    coding = checks["against:acceptance:coding"]
    assert coding.status == "failed" and coding.summary.startswith("dropped beyond 5%: AL 3.25 -> 2.10")
    assert coding.details["change"]["high"] < -0.05
    assert checks["against:acceptance:writing"].status == "passed"


def test_the_tolerance_is_judged_on_the_interval():
    assert judge_drop({"value": -0.2, "low": -0.3, "high": -0.1}, 0.05) == "failed"
    assert judge_drop({"value": -0.06, "low": -0.1, "high": 0.0}, 0.05) == "inconclusive"
    assert judge_drop({"value": -0.01, "low": -0.04, "high": 0.02}, 0.05) == "passed"
    # a small drop within the recipe's tolerance passes
    slightly = [dict(r, accepted_draft_tokens=r["accepted_draft_tokens"] - 3) for r in GOOD]
    lenient = Recipe.model_validate(
        {"name": "x", "model": {"checkpoint": "m"}, "validation": {"regression": {"max_acceptance_drop": 0.2}}}
    )
    assert {c.status for c in against_checks(report(GOOD), report(slightly), lenient)} == {"passed"}
    assert {c.status for c in against_checks(report(GOOD), report(slightly), RECIPE)} == {"failed"}


def test_unpaired_prompts_and_missing_categories():
    renamed = [dict(r, prompt="n" + r["prompt"]) for r in GOOD if r["category"] == "coding"]
    checks = {c.name: c for c in against_checks(report(GOOD), report(renamed), RECIPE)}
    coding = checks["against:acceptance:coding"]
    assert coding.details["paired_prompts"] == 0 and coding.details["change"]["value"] == 0.0
    assert coding.details["change"]["low"] < 0 < coding.details["change"]["high"]  # unpaired: resampled apart
    assert checks["against:acceptance:writing"].status == "skipped"
    assert "no writing prompts in the new report" in checks["against:acceptance:writing"].summary


def test_speed_is_judged_only_when_the_rounds_agree():
    old = report(GOOD, [point(1, [1.8, 1.9, 2.0]), point(2, [1.2, 1.3, 1.4]), point(4, [0.9, 1.0, 1.1])])
    new = report(GOOD, [point(1, [1.0, 1.1, 1.2]), point(2, [1.1, 1.3, 1.5]), point(4, [1.2, 1.25, 1.3])])
    checks = {c.name: c for c in against_checks(old, new, RECIPE)}
    assert checks["against:speedup:1"].status == "failed"
    assert checks["against:speedup:1"].summary.startswith("slower beyond 10% in every round: speedup 1.90 (1.80–2.00)")
    assert (
        checks["against:speedup:2"].status == "passed"
        and "not judged: the rounds overlap" in checks["against:speedup:2"].summary
    )
    assert checks["against:speedup:4"].status == "passed" and "the rounds agree" in checks["against:speedup:4"].summary


def test_build_identity_and_what_changed(tmp_path):
    ckpt = tmp_path / "m"
    ckpt.mkdir()
    (ckpt / "config.json").write_text('{"hidden_size": 8}')
    recipe = Recipe.model_validate({"name": "x", "model": {"checkpoint": str(ckpt)}})
    a = build_identity(recipe, {"target": "triton 2.50.0"})
    assert a["versions"]["specbuild"] and a["checkpoints"]["model.checkpoint"]["files"]["config.json"]["sha256"]
    assert identity_changes(a, build_identity(recipe, {"target": "triton 2.50.0"})) == []
    (ckpt / "config.json").write_text('{"hidden_size": 16}')
    other = Recipe.model_validate({"name": "x", "model": {"checkpoint": str(ckpt)}, "validation": {"max_tokens": 8}})
    changes = identity_changes(a, build_identity(other, {"target": "triton 2.51.0"}))
    assert any(c.startswith("recipe.content_sha256: ") for c in changes)
    assert any(c.startswith("checkpoints.model.checkpoint.files.config.json.sha256: ") for c in changes)
    assert "servers.target: triton 2.50.0 -> triton 2.51.0" in changes
    assert identity_changes(None, a) == ["the earlier report records no build identity"]


def test_the_earlier_report_must_be_one(tmp_path):
    with pytest.raises(UserError, match=r"--against: .*missing.json.* no such file"):
        load_report(tmp_path / "missing.json")
    (tmp_path / "other.json").write_text(json.dumps({"hello": 1}))
    with pytest.raises(UserError, match="is not a specbuild validation report .* give the report.json"):
        load_report(tmp_path / "other.json")
    (tmp_path / "r.json").write_text(json.dumps(report(GOOD)))
    assert load_report(tmp_path / "r.json")["recipe"] == "x"


def test_compile_refuses_a_missing_earlier_report_before_building(tmp_path, capsys):
    from pathlib import Path

    from specbuild.cli import main

    demo = Path(__file__).resolve().parents[2] / "recipes" / "demo.yaml"
    out = [f"--{kind}-dir" for kind in ("engines", "repo", "report")]
    args = [a for kind in out for a in (kind, str(tmp_path / kind.strip("-")))]
    assert main(["compile", str(demo), "--against", str(tmp_path / "old" / "report.json"), *args]) == 2
    assert "--against: " in capsys.readouterr().err and not any(tmp_path.iterdir())
