"""The cost_model check's own logic, without servers: which served configs it measures from (and why it skips),
how it joins the runtime's per-call costs with the performance check's served speedups, and the report's table.
The served path end to end: tests/triton_repository/test_served_reference.py (test_suite_on_the_reference_deployment)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from specbuild.facts.cost_model import LevelModel, StepCosts
from specbuild.validate.checks import cost_model
from specbuild.validate.checks.base import CheckResult


def core(**parameters) -> dict:
    return {"parameters": {k: {"string_value": v} for k, v in parameters.items()}}


class Server:
    def __init__(self, configs: dict):
        self.configs = configs

    def config(self, model: str) -> dict:
        if model not in self.configs:
            raise RuntimeError(f"unknown model {model}")
        return self.configs[model]

    def repository_index(self) -> list[dict]:
        return [{"name": n} for n in self.configs]


def context(target: dict, baseline: dict, performance: list | None = None, speculative: bool = True, runtime=None):
    finished = {}
    if performance is not None:
        finished["performance"] = CheckResult("performance", "", "passed", "", {"speedup": performance})
    recipe = SimpleNamespace(validation=SimpleNamespace(concurrency=[4, 1], max_tokens=16))
    return SimpleNamespace(
        spec=SimpleNamespace(speculative=speculative),
        recipe=recipe,
        target=SimpleNamespace(server=Server(target)),
        baseline=SimpleNamespace(server=Server(baseline)) if baseline is not None else None,
        options=SimpleNamespace(perf_max_tokens=None),
        prompts=[SimpleNamespace(text="a b")],
        progress=lambda *a: None,
        finished=finished,
        runtime=runtime,
    )


@pytest.fixture
def engines(tmp_path):
    for name in ("target", "baseline", "draft"):
        (tmp_path / name).mkdir()
    return tmp_path


def test_served_cores_reads_the_engine_folders_of_both_deployments(engines):
    target = {
        "tensorrt_llm": core(gpt_model_path=str(engines / "target"), tokenizer_dir="/tok"),
        "tensorrt_llm_draft": core(gpt_model_path=str(engines / "draft")),
    }
    baseline = {"tensorrt_llm": core(gpt_model_path=str(engines / "baseline"))}
    configs = cost_model.served_cores(context(target, baseline))
    assert set(configs) == {"target", "baseline", "draft"}
    assert configs["draft"] is target["tensorrt_llm_draft"]
    assert set(cost_model.served_cores(context({"tensorrt_llm": target["tensorrt_llm"]}, baseline))) == {
        "target",
        "baseline",
    }


@pytest.mark.parametrize(
    "target, why",
    [
        ({"tensorrt_llm": core(tokenizer_dir="/tok")}, "names no engine folder"),  # llm-api: model.yaml, no engine
        ({"tensorrt_llm": core(gpt_model_path="/nowhere/engine", tokenizer_dir="/tok")}, "not on this machine"),
        ({"toy": {}}, "did not give the tensorrt_llm configs"),
    ],
)
def test_the_check_skips_what_it_cannot_measure_and_says_why(engines, target, why):
    baseline = {"tensorrt_llm": core(gpt_model_path=str(engines / "baseline"))}
    result = cost_model.run(context(target, baseline))
    assert result.status == "skipped" and why in result.summary, result.summary


def test_the_check_needs_a_speculative_deployment_and_its_baseline(engines):
    target = {"tensorrt_llm": core(gpt_model_path=str(engines / "target"), tokenizer_dir="/tok")}
    assert cost_model.run(context(target, None)).status == "skipped"
    assert cost_model.run(context(target, target, speculative=False)).status == "skipped"


def test_limits_are_joined_with_the_served_speedups(engines):
    target = {"tensorrt_llm": core(gpt_model_path=str(engines / "target"), tokenizer_dir="/tok")}
    baseline = {"tensorrt_llm": core(gpt_model_path=str(engines / "baseline"))}
    base = StepCosts(steps=8, rows=1, step_ms=10.5, target_ms=10.0, draft_ms=0.0, accepted=0, verifications=8)
    spec = StepCosts(steps=3, rows=1, step_ms=17.0, target_ms=12.0, draft_ms=3.0, accepted=6, verifications=3)
    asked = {}

    class Runtime:
        name = "stand-in"

        def call_costs(self, configs, texts, max_tokens, levels, progress=None):
            asked.update(configs=configs, texts=texts, max_tokens=max_tokens, levels=levels)
            return [LevelModel(c, base, spec, in_process=1.5) for c in levels]

    ctx = context(
        target,
        baseline,
        performance=[{"concurrency": 1, "speedup": 1.2}, {"concurrency": 4, "speedup": None}],
        runtime=Runtime(),
    )
    result = cost_model.run(ctx)
    assert result.status == "passed", result.summary
    assert asked == {
        "configs": {"target": target["tensorrt_llm"], "baseline": baseline["tensorrt_llm"]},
        "texts": ["a b"],
        "max_tokens": 16,
        "levels": [1, 4],
    }
    one, four = result.details["levels"]
    assert (one["limit"], one["served"], one["served_share_of_limit"], one["in_process_share_of_limit"]) == (
        2.0,
        1.2,
        0.6,
        0.75,
    )
    assert four["served"] is None and four["served_share_of_limit"] is None
    assert result.summary.startswith("limit 2.00× at 1 (in process 1.50×, served 1.20× = 0.60 of it)")

    from specbuild.validate.report.cost_model import rows

    assert rows(result.details)[0] == [1, "10.00", "12.00", "3.00", "3.00", "2.00×", "1.50× (0.75)", "1.20× (0.60)"]

    ctx.runtime = SimpleNamespace(name="tensorrt-llm", call_costs=lambda *a, **k: None)
    skipped = cost_model.run(ctx)
    assert skipped.status == "skipped" and "tensorrt-llm" in skipped.summary
