"""The server's side of acceptance: the Prometheus parser, the counters' arithmetic, the comparison with the
client's figures the acceptance check makes, and the health check noticing a dead python stub (which Triton
2.51 still reports ready)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from validate_helpers import toy_recipe
from validate_toy.repo import write_toy_repo

from specbuild.validate import Endpoints, SuiteOptions, run_validation
from specbuild.validate.checks import acceptance
from specbuild.facts.metrics import PROMQL_AL
from specbuild.validate.server_metrics import SpecCounts, families, parse, value
from specbuild.validate.stats import AcceptanceRecord
from specbuild.runtimes.build import resolve_build


def exposition(model: str, steps: int, drafts: int, draft_tokens: int, accepted: int, per_position: list[int]) -> str:
    lines = [
        "# HELP specbuild_spec_decode_num_steps_total Verification steps",
        "# TYPE specbuild_spec_decode_num_steps_total counter",
        f'specbuild_spec_decode_num_steps_total{{model="{model}",version="1"}} {steps}',
        f'specbuild_spec_decode_num_drafts_total{{model="{model}",version="1"}} {drafts}',
        f'specbuild_spec_decode_num_draft_tokens_total{{model="{model}",version="1"}} {draft_tokens}',
        f'specbuild_spec_decode_num_accepted_tokens_total{{model="{model}",version="1"}} {accepted}',
        'nv_trt_llm_request_metrics{model="tensorrt_llm",request_type="max",version="1"} 8',
        'odd_metric{label="with \\"quotes\\", commas"} 2.5e+00',
        "not a sample line",
    ]
    lines += [
        f'specbuild_spec_decode_num_accepted_tokens_per_pos_total{{model="{model}",position="{i}",version="1"}} {n}'
        for i, n in enumerate(per_position)
    ]
    return "\n".join(lines) + "\n"


def test_parse_reads_names_labels_and_values():
    samples = parse(exposition("tensorrt_llm", 10, 9, 36, 20, [9, 6, 5]))
    assert "nv_trt_llm_request_metrics" in families(samples)
    assert value(samples, "nv_trt_llm_request_metrics", request_type="max") == 8
    assert value(samples, "odd_metric", label='with "quotes", commas') == 2.5
    assert value(samples, "nv_trt_llm_request_metrics", request_type="active") is None
    counts = SpecCounts.of(samples, "tensorrt_llm")
    assert (counts.steps, counts.drafts, counts.draft_tokens, counts.accepted, counts.per_position) == (
        10,
        9,
        36,
        20,
        [9, 6, 5],
    )
    assert SpecCounts.of(samples, "tensorrt_llm_bls") is None
    assert "num_accepted_tokens_total" in PROMQL_AL and "num_steps_total" in PROMQL_AL


def test_counts_subtract_and_give_the_acceptance_length():
    before = SpecCounts.of(parse(exposition("m", 4, 4, 16, 6, [4, 2])), "m")
    after = SpecCounts.of(parse(exposition("m", 14, 13, 52, 26, [13, 8, 5])), "m")
    delta = after - before
    assert (delta.steps, delta.draft_tokens, delta.accepted, delta.per_position) == (10, 36, 20, [9, 6, 5])
    assert delta.mean_acceptance_length == pytest.approx(1 + 20 / 10)
    assert delta.acceptance_rate == pytest.approx(20 / 36)
    assert after - None is after


def _record(steps, drafted, accepted):
    return AcceptanceRecord(0, steps + accepted + 1, accepted, drafted, None, steps, 1 + accepted / steps)


def _ctx(recipe, before: str | None, after: str | None, prompts=2):
    scrapes = None if before is None else (parse(before), parse(after))
    return SimpleNamespace(
        recipe=recipe, prompts=[None] * prompts, server_scrapes=scrapes, target=SimpleNamespace(model="ensemble")
    )  # the toy recipe serves an ensemble


def test_server_side_agrees_or_names_what_differs(toy_tokenizer):
    recipe = toy_recipe(toy_tokenizer)
    before = exposition("tensorrt_llm", 3, 3, 12, 5, [3, 2])
    after = exposition("tensorrt_llm", 3 + 10, 3 + 10, 12 + 40, 5 + 22, [3 + 10, 2 + 8, 4])
    records = [_record(4, 16, 9), _record(6, 24, 13)]
    details, problem = acceptance.server_side(_ctx(recipe, before, after), records)
    assert problem is None and details["agree"]
    assert details["server"]["mean_acceptance_length"] == pytest.approx(details["client"]["mean_acceptance_length"])
    details, problem = acceptance.server_side(_ctx(recipe, before, after), [_record(4, 16, 9), _record(6, 24, 12)])
    assert not details["agree"] and "accepted_tokens 22 (server) vs 21 (client)" in problem
    details, problem = acceptance.server_side(_ctx(recipe, before, after, prompts=3), records)
    assert "only 2 of 3 requests" in problem
    # no endpoint, an endpoint without specbuild's counters (TensorRT-LLM's C++ backend): reported, not failed
    details, problem = acceptance.server_side(_ctx(recipe, None, None), records)
    assert problem is None and not details["available"] and "--metrics-url" in details["why"]
    plain = 'nv_inference_count{model="tensorrt_llm",version="1"} 3\n'
    details, problem = acceptance.server_side(_ctx(recipe, plain, plain), records)
    assert problem is None and not details["available"] and "C++" in details["why"]


def _stub_pid(server_pid: int, model: str) -> int | None:
    """The python backend stub of `model` among the server's children (its command line names the model)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == server_pid and "triton_python_backend_stub" in cmdline and f"/{model}/" in cmdline:
            return int(entry)
    return None


@pytest.mark.timeout(300)
def test_health_notices_a_dead_stub_that_triton_still_reports_ready(toy_tokenizer, tmp_path):
    from specbuild.serve import TritonServer
    from validate_helpers import core_parameters

    recipe = toy_recipe(toy_tokenizer)
    repo = write_toy_repo(tmp_path / "repo", mode="speculative", core_parameters=core_parameters(recipe))
    with TritonServer(repo, log_path=tmp_path / "server.log", exit_timeout_s=1) as server:
        options = SuiteOptions(checks=["health"])
        assert (
            run_validation(resolve_build(recipe), Endpoints.of(server), options=options).check("health").status
            == "passed"
        )
        pid = _stub_pid(server.pid, "postprocessing")
        assert pid is not None, "the postprocessing stub process was not found"
        os.kill(pid, signal.SIGKILL)  # a stub this test's server started
        time.sleep(1.0)
        assert server.model_ready("postprocessing")  # what Triton 2.51 says
        health = run_validation(resolve_build(recipe), Endpoints.of(server), options=options).check("health")
        assert health.status == "failed"
        assert "stub" in health.summary and "ensemble" in health.summary, health.summary
