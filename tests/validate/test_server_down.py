"""A server that dies during validation is named as the cause: the check during which it went down is an error
saying so (how its process ended, when this process started it, as `specbuild compile` does; that it stopped
answering, otherwise), and the checks after it are not run against a dead server. Against a real tritonserver
serving the toy repository, killed with SIGKILL as the functional check starts."""

from __future__ import annotations

import os
import signal

import pytest
from validate_helpers import core_parameters, toy_recipe
from validate_toy.repo import write_toy_repo

from specbuild.validate import Endpoints, SuiteOptions, run_validation
from specbuild.validate.mix import MixResult
from specbuild.runtimes.build import resolve_build

pytestmark = pytest.mark.timeout(300)

CHECKS = ["health", "functional", "acceptance", "bad_input"]  # none of them needs the baseline


def _kill_when(server, title: str):
    def progress(stage: str, done: int, total: int) -> None:
        if stage == title and server.running():
            os.kill(server.pid, signal.SIGKILL)
            server.process.wait(timeout=30)

    return progress


@pytest.mark.parametrize("owner", ["compile", "validate"])
def test_a_server_killed_mid_run_is_named_and_the_rest_not_run(owner, toy_tokenizer, tmp_path):
    from specbuild.serve import TritonServer
    from specbuild.validate.checks import functional

    recipe = toy_recipe(toy_tokenizer)
    repo = write_toy_repo(tmp_path / "target", mode="speculative", core_parameters=core_parameters(recipe))
    with TritonServer(repo, log_path=tmp_path / "target.log", exit_timeout_s=1) as server:
        pid = server.pid
        reasons = {"target": server.exit_reason} if owner == "compile" else None
        result = run_validation(
            resolve_build(recipe),
            Endpoints.of(server),
            options=SuiteOptions(checks=CHECKS),
            progress=_kill_when(server, functional.TITLE),
            exit_reasons=reasons,
        )
    status = {c.name: c.status for c in result.checks}
    assert status == {"health": "passed", "functional": "error", "acceptance": "error", "bad_input": "error"}, [
        (c.name, c.summary) for c in result.checks
    ]
    assert not result.passed
    during = result.check("functional").summary
    after = [result.check(name).summary for name in ("acceptance", "bad_input")]
    if owner == "compile":
        cause = f"the speculative deployment's tritonserver (pid {pid}) was killed by SIGKILL (its log: "
        assert during.startswith(cause) and "during this check" in during, during
    else:
        cause = f"the speculative deployment's server at http://{server.http_address} stopped answering ("
        assert during.startswith(cause) and "during this check" in during, during
    assert all(text.startswith("not run: " + cause) for text in after), after


def test_requests_the_server_never_answered_are_not_counted_as_answered():
    mix = MixResult(concurrency=2, wall_s=2.0, sent=10, lost=1)
    mix.good["no answer"], mix.bad["no answer"] = 3, 2
    assert mix.answered == 4 and mix.requests_per_s == 2.0
    assert mix.to_dict()["answered"] == 4
