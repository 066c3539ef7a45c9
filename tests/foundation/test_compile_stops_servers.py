"""How compile's serve-and-validate stage stops its two servers: after the suite (passed or failed) each may finish
its requests (SIGINT, then the exit timeout); interrupted (Ctrl-C, SIGTERM) both are killed at once, since the only
requests in flight are the suite's own. Stand-in servers record how they were stopped; the real stop is
test_compile_signals.py's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.console import Console

import specbuild.compile as compile_module
import specbuild.validate.suite as suite_module
from specbuild.compile import CompileOptions, Stages, serve_and_validate
from specbuild.plan import Layout
from specbuild.recipe import load_recipe
from specbuild.processes.signals import Terminated
from specbuild.runtimes.build import resolve_build

ROOT = Path(__file__).resolve().parents[2]


class StandInServer:
    stopped: list[tuple[str, float | None]] = []

    def __init__(self, repo, **kw):
        self.tag = Path(repo).name
        self.http_address, self.grpc_url = "127.0.0.1:1", "127.0.0.1:2"
        self.client_cpus = None  # no CPU kept for a decoder

    def start(self):
        return self

    def stop(self, timeout_s=None):
        StandInServer.stopped.append((self.tag, timeout_s))

    def exit_reason(self):
        return None  # running


class Result:
    passed = True


@pytest.mark.parametrize(
    "outcome, timeout_s", [(None, None), (KeyboardInterrupt, 0), (Terminated, 0), (RuntimeError, None)]
)
def test_servers_stop_at_once_only_when_interrupted(tmp_path, monkeypatch, outcome, timeout_s):
    def suite(*args, **kw):
        assert set(kw["exit_reasons"]) == {"target", "baseline"}  # the suite can tell a server that died
        if outcome is not None:
            raise outcome()
        kw["report_dir"].mkdir(parents=True)  # the suite writes the report
        return Result()

    monkeypatch.setattr(compile_module, "TritonServer", StandInServer)
    monkeypatch.setattr(suite_module, "run_validation", suite)
    monkeypatch.setattr(
        compile_module, "print_result", lambda result, console: None
    )  # the stand-in result has no tables
    StandInServer.stopped = []
    recipe = load_recipe(ROOT / "tests" / "recipes" / "demo_tiny.yaml")
    layout = Layout(tmp_path / "engines", tmp_path / "triton_repo", tmp_path / "reports", recipe.name)
    console = Console(file=open(tmp_path / "out.txt", "w"))
    repositories = {"target": tmp_path / "target", "baseline": tmp_path / "baseline"}
    if outcome is None:
        assert (
            serve_and_validate(resolve_build(recipe), layout, repositories, CompileOptions(), Stages(console), console)
            == 0
        )
        assert json.loads((layout.report / "provenance.json").read_text())["kind"] == "report"
    else:
        with pytest.raises(outcome):
            serve_and_validate(resolve_build(recipe), layout, repositories, CompileOptions(), Stages(console), console)
    assert sorted(StandInServer.stopped) == [("baseline", timeout_s), ("target", timeout_s)]
