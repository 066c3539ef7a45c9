"""Spike and recovery, served by a real tritonserver: a toy deployment whose core follows the recipe's
draft_len_schedule ({1: 4, 2: 0}: drafting off from two requests in flight). Its drafting comes back after a spike
for ordinary prompts, and stays off for prompts holding STALE_ON once a spike turned it off for one of them (the
stale-after-spike variant, TensorRT-LLM's draft_len_schedule going to 0 and back): the check passes on the first and
fails on the second. One deployment serves both; the pure parts are tested without a server."""

from __future__ import annotations

import pytest
from validate_helpers import core_parameters, toy_recipe_dict

from specbuild.recipe.schema import Recipe
from specbuild.validate import Endpoints, SuiteOptions, run_validation
from specbuild.validate.aggregate import GroupAcceptance, Interval
from specbuild.validate.checks.order import ORDER
from specbuild.recipe.adaptive import off_point
from specbuild.runtimes.build import resolve_build
from specbuild.validate.checks.spike_recovery import recovered, spike_concurrency

pytestmark = pytest.mark.timeout(600)

SCHEDULE = {1: 4, 2: 0}
STALE_ON = "storm "
PROMPTS = [
    "the river ran past the old mill and the children",
    "a quiet morning in the town square",
    "letters from the station arrived late that winter",
]
SPIKE = {"prompts": 3, "requests": 8, "recovery_requests": 6}


def spike_recipe(tokenizer, prompts, schedule=SCHEDULE, **spike) -> Recipe:
    data = toy_recipe_dict(tokenizer, prompts=prompts, spike={**SPIKE, **spike})
    if schedule is not None:
        data["adaptive"] = {"draft_len_schedule": schedule}
    return Recipe.model_validate(data)


@pytest.fixture(scope="module")
def scheduled_server(tmp_path_factory, toy_tokenizer):
    """The toy deployment with the schedule in its core, stale after a spike for prompts holding STALE_ON."""
    from validate_toy.repo import write_toy_repo

    from specbuild.serve import TritonServer

    params = core_parameters(spike_recipe(toy_tokenizer, PROMPTS))
    assert params["draft_len_schedule"] == "1:4,2:0"
    root = tmp_path_factory.mktemp("toy-spike")
    repo = write_toy_repo(root / "spike", mode="speculative", core_parameters=params, stale_on=STALE_ON)
    with TritonServer(repo, log_path=root / "spike.log", exit_timeout_s=1) as server:
        yield server


def spike_check(recipe, server):
    result = run_validation(
        resolve_build(recipe), Endpoints.of(server), options=SuiteOptions(checks=["spike_recovery"])
    )
    return result.check("spike_recovery")


def test_the_check_is_listed_after_acceptance(capsys):
    from specbuild.cli import main

    assert ORDER.index("spike_recovery") == ORDER.index("acceptance") + 1
    assert main(["validate", "--help"]) == 0
    help_text = "".join(capsys.readouterr().out.split())  # click wraps the option's help
    assert ",".join(ORDER) in help_text


def test_drafting_that_comes_back_passes(scheduled_server, toy_tokenizer):
    check = spike_check(spike_recipe(toy_tokenizer, PROMPTS), scheduled_server)
    assert check.status == "passed", check.summary
    d = check.details
    assert d["off_point"] == 2 and d["spike_concurrency"] == 4 and len(d["prompts"]) == 3
    before, spike, after = d["before"], d["spike"], d["recovery"]
    assert before["requests"] == 3 and before["draft_tokens"] > 0 and before["acceptance_length"]["low"] > 1.5
    # the spike really turned drafting off: far fewer draft tokens per step than before, and a lower AL
    assert spike["requests"] == 8
    assert spike["draft_tokens_per_step"] < 0.5 * before["draft_tokens"] / before["steps"]
    assert spike["acceptance_length"]["value"] < before["acceptance_length"]["value"]
    # back in the first window: the same prompts, the same greedy drafts (the toy is deterministic)
    assert d["recovery_requests"] == 3 and len(d["recovery_windows"]) == 1
    assert after["acceptance_length"] == before["acceptance_length"]
    assert "within 3 requests at concurrency 1" in check.summary
    assert check.summary.startswith(f"before the spike AL {before['acceptance_length']['value']:.2f}")


def test_drafting_that_stays_off_after_the_spike_fails(scheduled_server, toy_tokenizer):
    stale = [STALE_ON + p for p in PROMPTS]
    check = spike_check(spike_recipe(toy_tokenizer, stale), scheduled_server)
    assert check.status == "failed", check.summary
    d = check.details
    assert d["before"]["draft_tokens"] > 0 and d["before"]["acceptance_length"]["low"] > 1.5
    assert d["recovery_requests"] is None
    assert len(d["recovery_windows"]) == 6 - 3 + 1  # every window within the bound was judged
    assert all(w["draft_tokens"] == 0 and w["acceptance_length"]["value"] == 1.0 for w in d["recovery_windows"])
    assert check.summary.startswith(
        "acceptance did not come back within 6 requests at concurrency 1 after the "
        "spike: the last 3 read AL 1.00 [1.00–1.00], drafting did not resume"
    )


def test_a_tolerance_the_recipe_sets_judges_recovery(scheduled_server, toy_tokenizer):
    check = spike_check(spike_recipe(toy_tokenizer, PROMPTS, max_acceptance_drop=0.1), scheduled_server)
    assert check.status == "passed", check.summary
    assert check.details["judged"] == "AL within max_acceptance_drop of the pre-spike AL"
    assert check.details["max_acceptance_drop"] == 0.1 and check.details["recovery_requests"] == 3


@pytest.mark.parametrize(
    "schedule, why",
    [
        (None, "no adaptive.draft_len_schedule: the draft length is fixed"),
        ({1: 4, 2: 2}, "adaptive.draft_len_schedule {1: 4, 2: 2} never turns drafting off (no draft length 0)"),
    ],
)
def test_skipped_with_its_reason_without_an_off_point(scheduled_server, toy_tokenizer, schedule, why):
    check = spike_check(spike_recipe(toy_tokenizer, PROMPTS, schedule=schedule), scheduled_server)
    assert check.status == "skipped" and check.summary.startswith(why)


def test_off_point_and_spike_concurrency():
    assert off_point([(1, 4), (4, 2), (8, 0)]) == 8
    assert off_point([(1, 4), (4, 2)]) is None
    assert spike_concurrency(None, 2, 8) == 4
    assert spike_concurrency(None, 8, 8) == 8
    assert spike_concurrency(None, 6, 8) == 8
    assert spike_concurrency(3, 2, 8) == 3


def group(value, low, high) -> GroupAcceptance:
    return GroupAcceptance("g", 3, 30, 60, 30, Interval(value, low, high), None, None)


def test_recovery_is_judged_on_the_intervals_or_the_recipes_tolerance():
    before = group(2.5, 2.2, 2.8)
    assert recovered(group(2.0, 1.7, 2.2), before, None)  # its interval reaches the pre-spike one
    assert not recovered(group(2.0, 1.7, 2.1), before, None)
    assert recovered(group(2.0, 2.0, 2.0), before, 0.2)  # 2.0 >= 0.8 x 2.5
    assert not recovered(group(1.9, 1.9, 1.9), before, 0.2)
