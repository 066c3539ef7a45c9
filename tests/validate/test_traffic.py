"""Validation on a team's own traffic, served by a real tritonserver: a categorised JSONL dataset (several record
formats) gives acceptance per category and per context length with intervals, and a per-category gate fails the
deployment whose head is weak on one category (the weak_head_server fixture: no draft accepted on coding) while
the good head passes."""

from __future__ import annotations

import json

import pytest
from conftest import WEAK_ON
from validate_helpers import TOY_DRAFT_LEN, toy_recipe_dict, write_recipe_file

from specbuild.validate import Endpoints, SuiteOptions, run_validation
from specbuild.runtimes.build import resolve_build

pytestmark = pytest.mark.timeout(600)

GATE = {"default": 1.5, "coding": 2.0}
RECORDS = [  # coding prompts hold WEAK_ON; the prose ones do not
    {"id": "c1", "category": "coding", "prompt": f"{WEAK_ON}read_config(path):\n    with open(path) as f:"},
    {"id": "c2", "category": "coding", "messages": [{"role": "user", "content": f"{WEAK_ON}area(r):\n    return"}]},
    {"id": "c3", "category": "coding", "prompt": f"class Queue:\n    {WEAK_ON}put(self, item):"},
    {
        "model": "toy",
        "messages": [{"role": "user", "content": f"{WEAK_ON}main():\n    args = parse()"}],
        "metadata": {"category": "coding"},
        "temperature": 0.7,
    },
    {"id": "w1", "category": "writing", "prompt": "the river ran past the old mill and the children"},
    {"id": "w2", "category": "writing", "conversations": [{"from": "human", "value": "a quiet morning in the town"}]},
    {"id": "w3", "category": "writing", "prompt": "on the first day of spring the market opened early, and"},
    {
        "custom_id": "w4",
        "body": {
            "model": "toy",
            "category": "writing",
            "messages": [{"role": "user", "content": "letters from the station arrived late"}],
        },
    },
]


def traffic_recipe(tokenizer, folder):
    """The dataset's recipe, read from its file (folder/traffic.yaml), so that the runs in this process and those of
    the command line record the same recipe (its path and text are part of a report's build identity)."""
    from specbuild.recipe import load_recipe

    path = folder / "traffic.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    data = toy_recipe_dict(tokenizer, prompts=str(path), min_acceptance_length=GATE)
    return load_recipe(write_recipe_file(folder / "traffic.yaml", data), check_files=False)  # as validate reads it


@pytest.fixture(scope="module")
def traffic_runs(toy_servers, weak_head_server, tmp_path_factory):
    """The dataset through the good head and the weak one (acceptance only), with their reports. The tokenizer
    carries a chat template (Llama-3.1's over the toy's byte tokens), so that every record format can be sent."""
    from validate_toy.tokenizer import write_llama31_chat_tokenizer

    folder = tmp_path_factory.mktemp("traffic")
    recipe = traffic_recipe(write_llama31_chat_tokenizer(folder / "llama31"), folder)
    runs = {
        name: run_validation(
            resolve_build(recipe),
            Endpoints.of(server),
            report_dir=folder / name,
            options=SuiteOptions(checks=["acceptance"]),
        )
        for name, server in (("good", toy_servers["target"]), ("weak", weak_head_server))
    }
    return runs, folder


def by_category(result) -> dict:
    return {g["group"]: g for g in result.check("acceptance").details["by_category"]}


def test_the_good_head_passes_every_category_gate(traffic_runs):
    runs, folder = traffic_runs
    acc = runs["good"].check("acceptance")
    assert acc.status == "passed", acc.summary
    groups = by_category(runs["good"])
    assert {name: g["requests"] for name, g in groups.items()} == {"coding": 4, "writing": 4}
    for g in groups.values():
        al = g["acceptance_length"]
        assert al["low"] >= GATE.get(g["group"], GATE["default"]) and al["low"] <= al["value"] <= al["high"]
    assert {v["group"]: v["status"] for v in acc.details["gate_verdicts"]} == {"coding": "passed", "writing": "passed"}
    assert runs["good"].prompt_set["categories"] == {"coding": 4, "writing": 4}


def test_a_head_weak_on_coding_fails_the_coding_gate_only(traffic_runs):
    runs, folder = traffic_runs
    acc = runs["weak"].check("acceptance")
    assert acc.status == "failed" and not runs["weak"].passed
    groups = by_category(runs["weak"])
    coding, writing = groups["coding"], groups["writing"]
    # every coding draft rejected: one token per verification step, the interval is the point
    assert coding["accepted_draft_tokens"] == 0 and coding["draft_tokens"] > 0
    assert coding["acceptance_length"] == {"value": 1.0, "low": 1.0, "high": 1.0}
    assert [p["value"] for p in coding["per_position"]] == [0.0] * TOY_DRAFT_LEN
    # writing is untouched: the same figures as the good head's
    assert writing == by_category(runs["good"])["writing"]
    assert {v["group"]: v["status"] for v in acc.details["gate_verdicts"]} == {"coding": "failed", "writing": "passed"}
    assert acc.summary.startswith("coding: AL 1.00 [1.00–1.00] below 2.0 (all of its 95% interval)")
    md = (folder / "weak" / "report.md").read_text()
    assert "| coding | 2.0 | 1.00 [1.00–1.00] | failed |" in md
    assert "| category | requests | steps | AL | acceptance rate | pos 1 |" in md
    assert "| context length | requests |" in md
    data = json.loads((folder / "weak" / "report.json").read_text())
    assert [g["group"] for g in data["checks"][0]["details"]["by_category"]] == ["coding", "writing"]
    assert (folder / "weak" / "acceptance_per_category.png").read_bytes()[:4] == b"\x89PNG"


# --- validate --against an earlier report ---------------------------------------------------------------------


def against_cli(folder, server, earlier, name) -> int:
    from specbuild.cli import main

    path = traffic_recipe(folder / "llama31", folder).source  # the recipe file of the runs in this process
    return main(
        [
            "validate",
            str(path),
            "--url",
            server.http_address,
            "--checks",
            "acceptance",
            "--against",
            str(earlier),
            "--report",
            str(folder / name),
        ]
    )


def test_against_the_same_build_passes(traffic_runs, toy_servers):
    runs, folder = traffic_runs
    assert against_cli(folder, toy_servers["target"], folder / "good" / "report.json", "again") == 0
    data = json.loads((folder / "again" / "report.json").read_text())
    against = {c["name"]: c for c in data["checks"] if c["name"].startswith("against:")}
    assert set(against) == {"against:acceptance:coding", "against:acceptance:writing"}
    for c in against.values():
        assert c["status"] == "passed"
        assert c["details"]["change"] == {"value": 0.0, "low": 0.0, "high": 0.0}  # the toy is deterministic
    assert data["against"]["changes"] == [] and data["build"]["recipe"]["content_sha256"]


def test_against_a_weaker_head_reports_the_drop_and_fails(traffic_runs, weak_head_server):
    import xml.etree.ElementTree as ET

    runs, folder = traffic_runs
    assert against_cli(folder, weak_head_server, folder / "good" / "report.json", "weaker") == 1
    data = json.loads((folder / "weaker" / "report.json").read_text())
    against = {c["name"]: c for c in data["checks"] if c["name"].startswith("against:")}
    coding, writing = against["against:acceptance:coding"], against["against:acceptance:writing"]
    good_coding = by_category(runs["good"])["coding"]["acceptance_length"]["value"]
    assert coding["status"] == "failed"
    assert coding["details"]["change"]["value"] == pytest.approx((1.0 - good_coding) / good_coding)
    assert coding["details"]["change"]["high"] < -0.05
    assert writing["status"] == "passed" and writing["details"]["change"]["value"] == 0.0
    # one JUnit case per category; the markdown table and the plot of the changes
    cases = {c.get("name"): c for c in ET.parse(folder / "weaker" / "junit.xml").getroot().iter("testcase")}
    assert cases["against:acceptance:coding"].find("failure") is not None
    assert cases["against:acceptance:writing"].find("failure") is None
    md = (folder / "weaker" / "report.md").read_text()
    assert f"## Against {folder / 'good' / 'report.json'}" in md
    assert "| coding | " in md and "| ❌ failed |" in md
    assert (folder / "weaker" / "against.png").read_bytes()[:4] == b"\x89PNG"
