"""The validation suite end to end against a real tritonserver (nvidia-pytriton's) serving the toy repository.

Expected figures are derived independently here: the toy's fake model (validate_toy/models/toy_lm.py) runs in
this process, and what the suite measured through Triton must match it.
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from validate_helpers import TOY_DRAFT_LEN, TOY_MAX_TOKENS, toy_recipe, toy_recipe_dict, write_recipe_file

from specbuild.facts import metrics
from specbuild.validate import Endpoints, SuiteOptions, run_validation
from specbuild.recipe.prompts import BUNDLED, load_prompt_file
from specbuild.runtimes.build import resolve_build

sys.path.insert(0, str(Path(__file__).parent / "validate_toy" / "models"))
import toy_lm  # noqa: E402

pytestmark = pytest.mark.timeout(600)

SHORT = dict(requests_per_level=4, load_seconds=2.0, load_clients=3)


def endpoints(server) -> Endpoints:
    return Endpoints.of(server)


def toy_speculation(prompt: str, max_tokens: int) -> tuple[list[int], int, int]:
    """(tokens, accepted drafts, verification steps) of the toy's speculative greedy decoding of `prompt`,
    as its core runs it: the prefill yields one token, then each step verifies TOY_DRAFT_LEN drafts."""
    ctx = toy_lm.encode(prompt.encode())
    out = [toy_lm.greedy_next(ctx)]
    accepted = steps = 0
    while len(out) < max_tokens:
        emitted, acc = toy_lm.speculate(ctx + out, TOY_DRAFT_LEN)
        accepted += acc
        steps += 1
        out += emitted[: max_tokens - len(out)]
    return out, accepted, steps


@pytest.fixture(scope="module")
def full_run(toy_servers, toy_tokenizer, tmp_path_factory):
    report = tmp_path_factory.mktemp("report") / "toy"
    stages = []
    result = run_validation(
        resolve_build(toy_recipe(toy_tokenizer)),
        endpoints(toy_servers["target"]),
        endpoints(toy_servers["baseline"]),
        report_dir=report,
        progress=lambda stage, done, total: stages.append(stage),
        options=SuiteOptions(**SHORT),
    )
    return result, report, stages


def test_every_check_passes_on_a_lossless_deployment(full_run):
    result, _, stages = full_run
    statuses = {c.name: c.status for c in result.checks}
    assert statuses == {
        "health": "passed",
        "functional": "passed",
        "lossless": "passed",
        "sampling": "passed",
        "acceptance": "passed",
        "spike_recovery": "skipped",
        "performance": "passed",
        "cost_model": "skipped",
        "bad_input": "passed",
        "load": "passed",
        "auto_disable": "skipped",  # no adaptive.disable_below
    }, [(c.name, c.summary) for c in result.checks if c.status != "passed"]
    assert result.passed
    assert any(s.startswith("performance: speculative, concurrency 4") for s in stages)


def bundled_by_id() -> dict:
    return {p.id: p for p in load_prompt_file(BUNDLED)}


def test_acceptance_matches_the_toy_models_own_speculation(full_run):
    result, _, _ = full_run
    acc = result.check("acceptance").details
    prompts = bundled_by_id()
    total_acc = total_steps = 0
    for record in acc["records"]:
        prompt = prompts[record["prompt"]]
        tokens, accepted, steps = toy_speculation(prompt.text, TOY_MAX_TOKENS)
        assert record["output_tokens"] == len(tokens)
        assert record["accepted_draft_tokens"] == accepted
        assert record["draft_tokens"] == TOY_DRAFT_LEN * steps
        assert record["steps"] == steps
        assert record["acceptance_length"] == pytest.approx(1 + accepted / steps)
        assert record["category"] == prompt.category
        assert record["prompt_tokens"] == len(prompt.text.encode())  # the toy tokenizer: one token per byte
        total_acc, total_steps = total_acc + accepted, total_steps + steps
    assert acc["mean_acceptance_length"] == pytest.approx(metrics.mean_acceptance_length(total_acc, total_steps))
    assert len(acc["per_position"]) == TOY_DRAFT_LEN
    assert acc["per_position"] == sorted(acc["per_position"], reverse=True)  # a chain: position i needs i - 1
    assert sum(acc["histogram"]) == total_steps
    # per category: the toy has no chat template (multi-turn chat left out) and takes 448 bytes at most
    # (long-context left out); each category pools its own records, and its interval holds its value
    sent = {r["category"] for r in acc["records"]}
    assert sent == {"writing", "coding", "math", "extraction", "summarising"}
    for g in acc["by_category"]:
        mine = [r for r in acc["records"] if r["category"] == g["group"]]
        al = g["acceptance_length"]
        assert al["value"] == pytest.approx(
            metrics.mean_acceptance_length(sum(r["accepted_draft_tokens"] for r in mine), sum(r["steps"] for r in mine))
        )
        assert al["low"] <= al["value"] <= al["high"] and g["requests"] == len(mine)
        assert len(g["per_position"]) == TOY_DRAFT_LEN
    assert sum(g["requests"] for g in acc["by_context_length"]) == len(acc["records"])
    left = {o["category"] for o in result.prompt_set["left_out"]}
    assert left == {"multi-turn chat", "long-context"}


def test_functional_output_is_the_toy_models_greedy_text(full_run):
    result, _, _ = full_run
    rows = result.check("functional").details["prompts"]
    prompts = bundled_by_id()
    assert len(rows) == result.prompts
    for row in rows:
        tokens, _, _ = toy_speculation(prompts[row["prompt"]].text, TOY_MAX_TOKENS)
        assert row["tokens"] == TOY_MAX_TOKENS
        assert toy_lm.decode(tokens).startswith(row["text"].rstrip("…"))
    stop = result.check("functional").details["stop_words"]
    assert len(stop["cases"]) == 2  # the toy tokenizer round-trips every byte


def test_performance_covers_both_deployments_at_every_level(full_run):
    result, _, _ = full_run
    perf = result.check("performance").details
    for deployment in ("speculative", "baseline"):
        levels = perf["levels"][deployment]
        assert [s["concurrency"] for s in levels] == [1, 2, 4]
        for s in levels:  # 4 requests per round, 3 rounds (validation.performance_rounds)
            assert s["requests"] == 3 * 4 and s["errors"] == 0
            assert s["output_tokens"] == 3 * 4 * TOY_MAX_TOKENS
            assert s["ttft_s"]["p50"] > 0 and s["itl_s"]["p99"] >= s["itl_s"]["p50"] > 0
            assert s["streamed"]
    assert [p["concurrency"] for p in perf["speedup"]] == [1, 2, 4]
    for p in perf["speedup"]:
        assert len(p["rounds"]) == 3 and p["speedup_min"] <= p["speedup"] <= p["speedup_max"]
    assert "crossover" in perf and perf["rounds"] == 3


def test_reports_are_written(full_run):
    result, report, _ = full_run
    names = sorted(p.name for p in report.iterdir())
    assert names == [
        "acceptance_per_category.png",
        "acceptance_per_position.png",
        "junit.xml",
        "latency_vs_concurrency.png",
        "report.json",
        "report.md",
        "speedup_vs_concurrency.png",
        "throughput_vs_concurrency.png",
    ]
    data = json.loads((report / "report.json").read_text())
    # cost_model, spike_recovery and auto_disable (skipped) included
    assert data["passed"] is True and len(data["checks"]) == 11
    suite = ET.parse(report / "junit.xml").getroot().find("testsuite")
    assert suite.get("tests") == "11" and suite.get("failures") == "0" and suite.get("errors") == "0"
    # the toy tokenizer has no chat template: validation.prompt_format auto sent the prompts as they are
    assert data["prompt_format"]["requested"] == "auto" and data["prompt_format"]["used"] == "raw"
    assert "has no chat template" in data["prompt_format"]["why"]
    assert data["prompt_format"]["example"] == load_prompt_file(BUNDLED)[0].text
    assert data["tokenizer"]["reader"] == "tokenizer.json (tokenizers)"
    md = (report / "report.md").read_text()
    for heading in ("## Checks", "## Performance", "## Acceptance", "## Sampling distribution", "## Bad input"):
        assert heading in md
    assert "- prompts: sent as they are (raw) — auto: the target's tokenizer" in md
    assert data["prompt_set"]["source"] == "bundled"
    assert "- prompt set: bundled (writing 2, coding 3, math 2, extraction 2, summarising 2)" in md
    assert "- left out: long-ops-log (long-context): " in md and "may add) > build.max_input_len 448" in md
    assert "| category | requests | steps | AL | acceptance rate | pos 1 |" in md
    for png in report.glob("*.png"):
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.name for p in result.report_files] == [
        "report.json",
        "junit.xml",
        "report.md",
        "latency_vs_concurrency.png",
        "throughput_vs_concurrency.png",
        "speedup_vs_concurrency.png",
        "acceptance_per_position.png",
        "acceptance_per_category.png",
    ]


def test_lossless_and_sampling_catch_a_broken_core(toy_servers, toy_tokenizer):
    """The broken core flips the token it generates at position 5 and decodes greedily at temperature > 0."""
    result = run_validation(
        resolve_build(toy_recipe(toy_tokenizer)),
        endpoints(toy_servers["broken"]),
        endpoints(toy_servers["baseline"]),
        options=SuiteOptions(checks=["lossless", "sampling"]),
    )
    assert not result.passed
    lossless, sampling = result.check("lossless"), result.check("sampling")
    assert lossless.status == "failed"
    diffs = lossless.details["differences"]
    assert len(diffs) == result.prompts
    for d in diffs:
        assert d["unit"] == "token" and d["position"] == 5
        assert d["speculative_tokens"][0] == d["baseline_tokens"][0] + 1
        assert d["speculative_text"] and d["baseline_text"]
    assert "at token 5" in lossless.summary
    assert sampling.status == "failed" and sampling.details["p_value"] < 1e-6


def test_chat_prompts_reach_the_server_through_the_targets_template(toy_servers, tmp_path):
    """A target whose tokenizer carries Llama-3.1's chat template (a stand-in with the toy's byte tokens, so that
    the toy server serves it): a chat prompt and a text prompt are sent rendered by the template, and the toy
    model's own speculation over the rendered text is what the acceptance check measured through Triton."""
    from validate_toy.tokenizer import write_llama31_chat_tokenizer

    from specbuild.checkpoints.client_tokenizer import load_tokenizer

    folder = write_llama31_chat_tokenizer(tmp_path / "llama31")
    chat = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Sum 2 and 2."}]
    recipe = toy_recipe(folder, prompts=[{"messages": chat, "id": "sum"}, "def add(a, b):"])
    result = run_validation(
        resolve_build(recipe),
        endpoints(toy_servers["target"]),
        report_dir=tmp_path / "report",
        options=SuiteOptions(checks=["functional", "acceptance"]),
    )
    assert result.passed, [(c.name, c.summary) for c in result.checks]
    tok = load_tokenizer(folder)
    rendered = [tok.render_chat(chat), tok.render_chat([{"role": "user", "content": "def add(a, b):"}])]
    assert rendered[0].startswith("<|start_header_id|>system<|end_header_id|>\n\n") and rendered[0].endswith(
        "Sum 2 and 2.<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
    )
    for text, record in zip(rendered, result.check("acceptance").details["records"]):
        tokens, accepted, steps = toy_speculation(text, TOY_MAX_TOKENS)
        assert (record["output_tokens"], record["accepted_draft_tokens"], record["steps"]) == (
            len(tokens),
            accepted,
            steps,
        )
    data = json.loads((tmp_path / "report" / "report.json").read_text())
    assert data["prompt_format"]["used"] == "chat" and data["prompt_format"]["example"] == rendered[0]
    assert data["prompt_format"]["template"] == f"{folder}/tokenizer_config.json (chat_template)"
    md = (tmp_path / "report" / "report.md").read_text()
    assert (
        f"- prompts: sent through the target's chat template ({folder}/tokenizer_config.json (chat_template)) "
        "— auto: the target's tokenizer has a chat template" in md
    )


def test_health_names_each_config_mismatch(toy_servers, toy_tokenizer):
    data = toy_recipe_dict(toy_tokenizer)
    data["build"]["max_batch_size"] = 16
    data["triton"]["streaming"] = False
    data["speculation"]["choices"] = [[0], [1]]
    from specbuild.recipe.schema import Recipe

    result = run_validation(
        resolve_build(Recipe.model_validate(data)),
        endpoints(toy_servers["target"]),
        endpoints(toy_servers["baseline"]),
        options=SuiteOptions(checks=["health"]),
    )
    problems = result.check("health").details["problems"]
    text = "\n".join(problems)
    assert "max_batch_size is 8, the recipe's build.max_batch_size is 16" in text
    assert "tensorrt_llm is decoupled" in text
    assert "eagle_choices" in text
    assert result.check("health").status == "failed"


def test_gates_decide_the_outcome(toy_servers, toy_tokenizer):
    recipe = toy_recipe(toy_tokenizer, min_acceptance_length=50.0, min_speedup=1000.0, concurrency=[1])
    result = run_validation(
        resolve_build(recipe),
        endpoints(toy_servers["target"]),
        endpoints(toy_servers["baseline"]),
        options=SuiteOptions(checks=["acceptance", "performance"], requests_per_level=2),
    )
    acc, perf = result.check("acceptance"), result.check("performance")
    assert (
        acc.status == "failed"
        and acc.summary.startswith("all prompts: AL ")
        and "below 50.0 (all of its 95% interval)" in acc.summary
    )
    assert acc.gate == "validation.min_acceptance_length >= 50.0"
    assert perf.status == "failed" and "speedup at concurrency 1 is" in perf.summary and "< 1000.0" in perf.summary
    assert not result.passed


# --- the command line -----------------------------------------------------------------------------------------


def cli(*args: str) -> int:
    from specbuild.cli import main

    return main(list(args))


def test_cli_validate_exit_codes(toy_servers, toy_tokenizer, tmp_path, capsys):
    target, base, broken = (toy_servers[k] for k in ("target", "baseline", "broken"))
    recipe = write_recipe_file(tmp_path / "toy.yaml", toy_recipe_dict(toy_tokenizer))
    checks = "health,lossless,acceptance"
    assert (
        cli(
            "validate",
            str(recipe),
            "--url",
            target.http_address,
            "--grpc-url",
            target.grpc_url,
            "--baseline-url",
            base.http_address,
            "--checks",
            checks,
            "--report",
            str(tmp_path / "r"),
        )
        == 0
    )
    assert (tmp_path / "r" / "report.json").is_file()
    assert (
        cli(
            "validate",
            str(recipe),
            "--url",
            broken.http_address,
            "--baseline-url",
            base.http_address,
            "--checks",
            checks,
        )
        == 1
    )
    assert "FAILED lossless" in capsys.readouterr().err
    # a user error: require_lossless without a baseline deployment
    assert cli("validate", str(recipe), "--url", target.http_address, "--checks", checks) == 2
    assert "--baseline-url" in capsys.readouterr().err
    assert cli("validate", str(recipe), "--url", "nohost", "--checks", "health") == 2
    assert cli("validate", str(recipe), "--url", "127.0.0.1:1", "--checks", "health") == 2
    assert "no Triton server answers" in capsys.readouterr().err
    assert cli("validate", str(recipe), "--url", target.http_address, "--checks", "health,nope") == 2


def test_cli_validate_json(toy_servers, toy_tokenizer, tmp_path, capsys):
    recipe = write_recipe_file(tmp_path / "toy.yaml", toy_recipe_dict(toy_tokenizer))
    target = toy_servers["target"]
    assert cli("validate", str(recipe), "--url", target.http_address, "--checks", "health", "--json") == 0
    data = json.loads(capsys.readouterr().out)
    assert data["passed"] is True and [c["name"] for c in data["checks"]] == ["health"]


def test_load_mixes_good_and_bad_requests_and_reports_the_local_server(full_run):
    result, report, _ = full_run
    load = result.check("load").details
    assert load["lost"] == 0 and load["good"]["equal"] == load["good"]["sent"] > 0
    assert load["bad"]["sent"] > 0 and load["bad"]["accepted"] == 0 and load["bad"]["no answer"] == 0
    assert set(load["by_model"]) == {"ensemble", "tensorrt_llm_bls"}
    server = load["server"]  # found by its port: the toy servers run on this machine
    assert server is not None and server["alive"] and server["stubs_died"] == []
    assert {"tensorrt_llm_0_0", "tensorrt_llm_bls_0_0"} <= set(server["stubs"])
    assert server["rss_before_bytes"] > 0 and server["rss_growth"] is not None
    assert (
        "## Load" in (report / "report.md").read_text() and "RSS (server + stubs)" in (report / "report.md").read_text()
    )
