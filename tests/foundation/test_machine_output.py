"""Output for machines and logs (docs/machine-output.md): lines that fit the log (tables folded, never cut) and steady
progress lines when the output is not a terminal, one JSON document per `--json`, `--log-format json` events, NO_COLOR.

The progress lines are driven by a fake clock (no test here waits for time to pass); the command-line cases run
specbuild as a CI job does: a subprocess whose stdout and stderr are pipes, with COLUMNS unset."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from specbuild.output.console import LOG_WIDTH, make_console
from specbuild.output.document import FORMAT
from specbuild.output.events import EventLog
from specbuild.output.steps import Heartbeat, Stages

ROOT = Path(__file__).resolve().parents[2]
DEMO_TINY = ROOT / "tests" / "recipes" / "demo_tiny.yaml"
SHARED_KEYS = {"format", "command", "specbuild_version", "verdict", "exit_code", "steps", "findings", "outputs"}
COLOUR = re.compile(r"\x1b\[[0-9;]*m")


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _stages(clock, interval=10.0):
    out, log = io.StringIO(), io.StringIO()
    stages = Stages(
        Console(file=out, width=200),
        events=EventLog(enabled=True, stream=log),
        clock=clock,
        interval=interval,
        background=False,
    )
    return stages, out, log


def _events(log: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in log.getvalue().splitlines()]


def test_a_step_prints_a_progress_line_per_interval_in_a_log():
    clock = FakeClock()
    stages, out, log = _stages(clock)
    with stages.stage("serve repo") as progress:
        clock.now += 4
        progress("loading")  # 4 s: not yet
        clock.now += 7
        progress("models ready: 1/2")  # 11 s: the first line, with what the step last said
        clock.now += 25
        progress("models ready: 2/2")  # 36 s after a silence: one line, not one per missed interval
        clock.now += 1
        progress("done")  # 37 s: the next is due at 40 s
    lines = out.getvalue().splitlines()
    assert lines == [
        "… serve repo: running for 11 s: models ready: 1/2",
        "… serve repo: running for 36 s: models ready: 2/2",
        "✓ serve repo (37.0 s)",
    ]
    events = _events(log)
    assert [e["event"] for e in events] == ["step.started", "step.progress", "step.progress", "step.finished"]
    assert events[-1]["status"] == "done" and events[-1]["duration_s"] == 37.0
    assert stages.to_list() == [{"name": "serve repo", "status": "done", "duration_s": 37.0}]


def test_a_silent_step_still_beats_at_a_steady_interval():
    """The background beater: `wait` is the step's end (False until it finishes); the fake one advances the clock."""
    clock = FakeClock()
    said: list[tuple[float, str | None]] = []
    heartbeat = Heartbeat(lambda elapsed, message: said.append((elapsed, message)), clock, interval=10.0)

    def wait(seconds: float) -> bool:
        clock.now += seconds
        return clock.now - heartbeat.started > 45  # the step ends after 45 s

    heartbeat.run(wait)
    assert [elapsed for elapsed, _ in said] == [10.0, 20.0, 30.0, 40.0]


def test_a_failed_step_is_recorded_and_has_no_tick():
    clock = FakeClock()
    stages, out, log = _stages(clock)
    with pytest.raises(RuntimeError):
        with stages.stage("engines"):
            clock.now += 3
            raise RuntimeError("boom")
    assert "✓" not in out.getvalue()
    assert stages.to_list() == [{"name": "engines", "status": "failed", "duration_s": 3.0}]
    assert _events(log)[-1] == {**_events(log)[-1], "event": "step.finished", "status": "failed"}


def test_a_console_on_a_pipe_fits_its_lines_to_columns_or_160(monkeypatch, capsys):
    """Issue #39 item 6: a log's lines fit COLUMNS (160 when unknown); a line a terminal would wrap itself (soft
    wrap) is wrapped between words; a console made to keep its lines whole (the serve banner) keeps them."""
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    assert make_console().width == LOG_WIDTH == 160  # pytest's captured stdout is not a terminal
    said = "the engines were made from the same inputs, " * 8
    make_console().print(f"… validate: running for 15 s: {said}", soft_wrap=True)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) > 1 and all(len(line) <= 160 for line in lines)
    assert " ".join(line.strip() for line in lines) == f"… validate: running for 15 s: {said}".strip()
    make_console(soft_wrap=True).print(f"serving {said} pid 42")
    assert capsys.readouterr().out == f"serving {said} pid 42\n"  # one line, as scripts read it
    monkeypatch.setenv("COLUMNS", "60")
    assert make_console().width == 60


def _run(*args: str, env: dict | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "FORCE_COLOR", "NO_COLOR")}
    environ["PYTHONPATH"] = str(ROOT / "pipeline")
    environ.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "specbuild.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=environ,
        cwd=cwd,
        timeout=300,
    )


def _one_document(stdout: str) -> dict:
    doc = json.loads(stdout)  # the whole of stdout: one document, nothing else
    assert SHARED_KEYS <= set(doc) and doc["format"] == FORMAT
    return doc


def _squeezed(text: str) -> str:
    """Text without whitespace or table borders: a cell folded over several lines reads as its whole text again."""
    return "".join(ch for ch in text if not ch.isspace() and ch not in "│┃┆|─━┼╇╈")


def test_doctor_through_a_pipe_prints_every_row_whole():
    text = _run("doctor")
    doc = _one_document(_run("doctor", "--json").stdout)
    assert doc["command"] == "doctor" and doc["verdict"] in ("ready", "not-ready")
    assert {"ready", "checks"} <= set(doc)  # its own keys, as before
    assert text.returncode == doc["exit_code"]
    assert "…" not in text.stdout
    assert max(len(line) for line in text.stdout.splitlines()) <= LOG_WIDTH  # a log's width: cells fold
    for check in doc["checks"]:  # each check's finding whole, folded in its cell
        assert _squeezed(check["detail"]) in _squeezed(text.stdout), check["detail"]
    failed = [c for c in doc["checks"] if c["status"] == "fail"]
    assert [f["field"] for f in doc["findings"] if f["severity"] == "error"] == [c["name"] for c in failed]


def test_no_color_turns_colours_off_even_when_forced():
    coloured = _run("doctor", env={"FORCE_COLOR": "1"}).stdout
    assert COLOUR.search(coloured) and re.search(r"\x1b\[[0-9;]*3[1-7](;[0-9;]*)?m", coloured)
    plain = _run("doctor", env={"FORCE_COLOR": "1", "NO_COLOR": "1"}).stdout
    assert not re.search(r"\x1b\[(?:[0-9;]*;)?(?:3[0-8]|9[0-7])(?:;[0-9;]*)?m", plain)


def test_check_json_is_one_document_for_a_good_and_a_bad_recipe():
    good = _run("check", str(DEMO_TINY), "--json")
    doc = _one_document(good.stdout)
    assert good.returncode == 0 and doc["verdict"] == "ok" and doc["name"] == "demo-tiny"
    assert {f["severity"] for f in doc["findings"]} <= {"warning", "note"}
    bad_recipe = ROOT / "tests" / "recipes" / "invalid" / "06-unknown-model-key.yaml"
    bad = _run("check", str(bad_recipe), "--json")
    doc = _one_document(bad.stdout)
    assert bad.returncode == 2 == doc["exit_code"] and doc["verdict"] == "invalid"
    errors = [f for f in doc["findings"] if f["severity"] == "error"]
    assert errors and all(f["file"] == str(bad_recipe) and f["line"] for f in errors)
    assert errors[0]["field"].startswith("model") and errors[0]["message"] in bad.stderr  # said on stderr too


def test_plan_json_keeps_its_keys_and_gains_the_shared_ones():
    doc = _one_document(_run("plan", str(DEMO_TINY), "--json").stdout)
    assert {"recipe", "name", "runtime", "flavour", "method", "checkpoints"} <= set(doc)
    assert doc["verdict"] == "planned" and doc["outputs"]["repository"].endswith("demo-tiny")
    assert all(s["status"] == "planned" and s["name"] == s["title"] and "command" in s for s in doc["steps"])


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """compile --no-validate --json with --log-format json, through pipes."""
    tmp = tmp_path_factory.mktemp("ci")
    run = _run(
        "--log-format",
        "json",
        "compile",
        str(DEMO_TINY),
        "--no-validate",
        "--json",
        "--engines-dir",
        str(tmp / "e"),
        "--repo-dir",
        str(tmp / "r"),
        "--report-dir",
        str(tmp / "rep"),
    )
    return run, tmp


def test_compile_json_is_one_document_with_the_steps_run(built):
    run, tmp = built
    assert run.returncode == 0, run.stderr
    doc = _one_document(run.stdout)
    assert doc["command"] == "compile" and doc["verdict"] == "built" and doc["exit_code"] == 0
    names = [s["name"] for s in doc["steps"]]
    assert names[0] == "engines" and sum(n.startswith("repository ") for n in names) == 2
    assert all(s["status"] == "done" and s["duration_s"] >= 0 for s in doc["steps"])
    assert Path(doc["outputs"]["repository"]).resolve() == (tmp / "r" / "demo-tiny").resolve()
    assert doc["validation"] is None


def test_log_format_json_makes_stderr_json_events(built):
    run, _ = built
    events = [json.loads(line) for line in run.stderr.splitlines()]  # every line is one event
    kinds = [e["event"] for e in events]
    assert kinds.count("step.started") == kinds.count("step.finished") == len(json.loads(run.stdout)["steps"])
    assert kinds[-1] == "finished" and events[-1]["exit_code"] == 0
    assert all(e["command"] == "compile" and e["time"] for e in events)


def test_a_refused_compile_json_still_prints_one_document(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(DEMO_TINY.read_text().replace("../../checkpoints/tiny/eagle", str(tmp_path / "nothing")))
    run = _run("--log-format", "json", "compile", str(recipe), "--json", "--engines-dir", str(tmp_path / "e"))
    doc = _one_document(run.stdout)
    assert run.returncode == 2 and doc["verdict"] == "error" and doc["findings"][0]["field"]
    events = [json.loads(line) for line in run.stderr.splitlines()]
    assert [e["event"] for e in events][-2:] == ["error", "finished"] and events[-1]["exit_code"] == 2


def test_render_only_json_names_the_rendered_folders(tmp_path):
    run = _run(
        "compile", str(ROOT / "recipes" / "tensorrt-llm" / "medusa.yaml"), "--render-only", "--json", cwd=tmp_path
    )
    doc = _one_document(run.stdout)
    assert run.returncode == 0 == doc["exit_code"] and doc["verdict"] == "rendered", run.stderr[-2000:]
    repository = tmp_path / doc["outputs"]["repository"]
    assert repository.resolve() == (tmp_path / "render" / "trt-medusa" / "triton_repo" / "trt-medusa").resolve()
    assert (repository / "tensorrt_llm" / "config.pbtxt").is_file()
    assert [s["name"] for s in doc["steps"]][0].startswith("repository ")


def test_a_step_prints_nothing_after_it_ended():
    """A thread still reporting progress after its step ended (the suite's workers when a compile is interrupted)
    prints no line after the step's own end."""
    from specbuild.output.steps import Heartbeat

    lines, now = [], [0.0]
    beat = Heartbeat(lambda elapsed, message: lines.append(message), lambda: now[0], 10.0)
    now[0] = 11.0
    beat.update("running")
    beat.close()
    now[0] = 30.0
    beat.update("a straggler")
    assert lines == ["running"]
