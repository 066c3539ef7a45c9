"""The suite end to end against an llm-api deployment on the CPU: the repository specbuild writes for the LLM-API
flavour (one `tensorrt_llm`, model.yaml with speculative_config NGram) and its baseline (the same model.yaml
without speculative_config), served by nvidia-pytriton's tritonserver with specbuild's model.py. Then the same
target checked against a recipe it does not match (health must say so)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specbuild.plan import Layout
from specbuild.recipe.schema import Recipe
from specbuild.validate import Endpoints, SuiteOptions, run_validation
from specbuild.runtimes.build import resolve_build
from specbuild.methods import describe

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "checkpoints" / "tiny"
pytestmark = [
    pytest.mark.timeout(900),
    pytest.mark.skipif(not (TINY / "target" / "config.json").is_file(), reason="checkpoints/tiny not built"),
]
PROMPTS = ["def add(a, b):\n    return", "x = [1, 2, 3]\ny = [1, 2,", "class Stack:\n    def push(self, item):"]
OPTIONS = SuiteOptions(requests_per_level=2, load_seconds=1.5, load_clients=2)


def make_recipe(**triton) -> Recipe:
    return Recipe.model_validate(
        {
            "name": "validate-llmapi",
            "runtime": "reference",
            "flavour": "llm-api",
            "model": {"checkpoint": str(TINY / "target"), "dtype": "float32"},
            "speculation": {"method": "prompt_lookup", "max_draft_len": 3, "max_matching_ngram_size": 2},
            "build": {"max_batch_size": 4, "max_input_len": 128, "max_seq_len": 256},
            "triton": {"streaming": True, **triton},
            "validation": {
                "prompts": PROMPTS,
                "max_tokens": 16,
                "concurrency": [1, 2],
                "require_lossless": True,
                "min_acceptance_length": 1.0,
                "load_clients": 2,
                "load_seconds": 1.5,
            },
        }
    )


@pytest.fixture(scope="module")
def deployments(tmp_path_factory):
    import torch

    from specbuild.runtimes import runtime_for
    from specbuild.serve import TritonServer

    torch.set_num_threads(1)
    recipe = make_recipe()
    root = tmp_path_factory.mktemp("llmapi-suite")
    layout = Layout(root / "engines", root / "triton_repo", root / "reports", recipe.name)
    servers = {}
    try:
        for role in ("target", "baseline"):
            repo = runtime_for(recipe).write_repository(recipe, describe(recipe), layout, role)
            servers[role] = TritonServer(repo, log_path=root / f"tritonserver-{role}.log", exit_timeout_s=1).start()
        yield recipe, servers
    finally:
        for server in servers.values():
            server.stop()


def test_suite_passes_on_the_llmapi_deployment(deployments, tmp_path):
    recipe, servers = deployments
    result = run_validation(
        resolve_build(recipe),
        Endpoints.of(servers["target"]),
        Endpoints.of(servers["baseline"]),
        report_dir=tmp_path / "report",
        options=OPTIONS,
    )
    status = {c.name: c.status for c in result.checks}
    summaries = {c.name: c.summary for c in result.checks}
    for name in ("health", "functional", "lossless", "acceptance", "bad_input"):
        assert status[name] == "passed", (name, summaries[name])
    # slower than the baseline at concurrency 1 (a CPU deployment may be) is a warning, not a failure
    assert status["performance"] == "passed" or (
        status["performance"] == "warned" and result.check("performance").details["slower_than_baseline"]
    ), summaries["performance"]
    assert status["load"] in ("passed", "warned"), summaries["load"]
    assert status["sampling"] == "skipped"  # not asked for in this recipe

    assert result.serving_model == "tensorrt_llm" and result.to_dict()["contract"] == "llm-api"
    health = result.check("health").details["speculative"]
    assert set(health["models"]) == {"tensorrt_llm"} and health["core"]["max_batch_size"] == 0
    lossless = result.check("lossless")
    assert "text for text" in lossless.summary and lossless.details["compared"].startswith("text")
    acceptance = result.check("acceptance").details
    assert acceptance["draft_tokens"] > 0 and acceptance["accepted_draft_tokens"] > 0  # real per-request counters
    assert acceptance["mean_acceptance_length"] > 1.0 and acceptance["steps_from"] == ["stream"]
    functional = result.check("functional").details
    assert functional["stop_words"].get("cases"), functional["stop_words"]  # stop strings were exercised
    cases = {row["case"]: row for row in result.check("bad_input").details["cases"]}
    assert cases["prompt longer than max_num_tokens"]["outcome"] == "refused"
    assert "should not exceed max_num_tokens" in cases["prompt longer than max_num_tokens"]["message"]
    assert (
        cases["stop request without a request id"]["message"]
        == "A request id must be provided for request cancellation"
    )
    assert cases["stop + request id cancels a running stream (gRPC)"]["outcome"].startswith("cancelled")
    for name in (
        "temperature NaN (gRPC)",
        "top_p above 1",
        "top_k negative",
        "max_tokens of the wrong shape (gRPC)",
        "max_tokens of the wrong data type (gRPC)",
        "text_input of the wrong shape (gRPC)",
    ):
        assert cases[name]["outcome"] == "refused", (name, cases[name])
    load = result.check("load").details  # the mix: one model, every protocol, every llm-api bad case
    assert load["lost"] == 0 and load["by_model"].keys() == {"tensorrt_llm"} and load["bad"]["accepted"] == 0
    assert load["server"] is not None and load["server"]["stubs_died"] == []
    levels = result.check("performance").details["levels"]
    assert set(levels) == {"speculative", "baseline"} and all(
        lv["output_tokens"] > 0 for vs in levels.values() for lv in vs
    )
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    assert report["contract"] == "llm-api" and report["passed"]


def test_health_says_when_the_served_model_does_not_match_the_recipe(deployments):
    _, servers = deployments
    recipe = make_recipe(streaming=False)  # the served model is decoupled
    result = run_validation(
        resolve_build(recipe),
        Endpoints.of(servers["target"]),
        Endpoints.of(servers["baseline"]),
        options=SuiteOptions(checks=["health"]),
    )
    health = result.check("health")
    assert health.status == "failed"
    assert any(
        "tensorrt_llm is decoupled; the recipe (triton.streaming: false) needs not decoupled" in p
        for p in health.details["problems"]
    ), health.details["problems"]
