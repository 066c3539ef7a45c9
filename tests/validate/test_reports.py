"""Report writers on a hand-made result: report.json, junit.xml, report.md, plots, atomic replacement."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from specbuild.validate import Endpoints
from specbuild.validate.checks.base import CheckResult
from specbuild.validate.report import write_reports
from specbuild.validate.result import ValidationResult


def level(dep, c, tps):
    dist = {"n": 4, "avg": 0.02, "min": 0.01, "max": 0.04, "p50": 0.02, "p90": 0.03, "p99": 0.04}
    return {
        "deployment": dep,
        "concurrency": c,
        "requests": 4,
        "errors": 0,
        "wall_s": 1.0,
        "output_tokens": int(tps),
        "output_tokens_per_s": tps,
        "requests_per_s": 4.0,
        "ttft_s": dist,
        "itl_s": dist,
        "latency_s": dist,
        "user_tokens_per_s": None,
        "streamed": True,
        "first_error": None,
    }


def make_result(with_plots: bool = True) -> ValidationResult:
    perf = {
        "levels": {
            "speculative": [level("speculative", c, t) for c, t in ((1, 200.0), (2, 300.0), (4, 350.0))],
            "baseline": [level("baseline", c, t) for c, t in ((1, 100.0), (2, 190.0), (4, 400.0))],
        },
        "speedup": [
            {"concurrency": 1, "speculative_tokens_per_s": 200.0, "baseline_tokens_per_s": 100.0, "speedup": 2.0},
            {"concurrency": 2, "speculative_tokens_per_s": 300.0, "baseline_tokens_per_s": 190.0, "speedup": 300 / 190},
            {"concurrency": 4, "speculative_tokens_per_s": 350.0, "baseline_tokens_per_s": 400.0, "speedup": 0.875},
        ],
        "crossover": {
            "first_level_below_1": 4,
            "interpolated": 3.4,
            "always_faster": False,
            "never_faster": False,
            "slower_levels": [4],
            "faster_levels": [1, 2],
        },
        "max_tokens": 16,
        "protocol": "HTTP generate_stream",
        "itl_definition": "gap / tokens",
    }
    acc = {
        "mean_acceptance_length": 2.5,
        "acceptance_rate": 0.4,
        "accepted_draft_tokens": 12,
        "draft_tokens": 30,
        "steps": 8,
        "per_position": [0.75, 0.5, 0.25],
        "histogram": [2, 2, 2, 2],
        "records": [
            {
                "prompt_index": 0,
                "output_tokens": 21,
                "accepted_draft_tokens": 12,
                "draft_tokens": 30,
                "server_acceptance_rate": 0.4,
                "steps": 8,
                "acceptance_length": 2.5,
                "accepted_per_step": [0, 1, 2, 3, 0, 1, 2, 3],
            }
        ],
    }
    checks = [
        CheckResult("health", "Health", "passed", "all ready", {"models": {"a": 1}}, duration_s=0.1),
        CheckResult(
            "lossless",
            "Lossless",
            "failed",
            "1/2 prompts differ",
            gate="validation.require_lossless",
            details={
                "differences": [
                    {
                        "prompt": "p0",
                        "unit": "token",
                        "position": 5,
                        "speculative_text": " foo",
                        "baseline_text": " bar",
                    }
                ]
            },
        ),
        CheckResult("sampling", "Sampling", "skipped", "not requested"),
        CheckResult("acceptance", "Acceptance", "passed", "AL 2.50", acc if with_plots else {}),
        CheckResult("performance", "Performance", "passed", "speedup 2.00x at 1", perf if with_plots else {}),
        CheckResult("load", "Load", "warned", "1 answer diverged", {"nan": float("nan"), "tuple": (1, 2)}),
        CheckResult("bad_input", "Bad input", "error", "the check could not run: boom"),
    ]
    return ValidationResult(
        "demo",
        "eagle",
        "reference",
        Endpoints("127.0.0.1:1", "127.0.0.1:2"),
        Endpoints("127.0.0.1:3"),
        "ensemble",
        checks,
        "2026-01-01T00:00:00+00:00",
        12.5,
        12,
        gates={"require_lossless": True},
    )


def test_result_passes_only_without_failures_and_errors():
    r = make_result()
    assert not r.passed and [c.name for c in r.failures] == ["lossless", "bad_input"]
    r.checks = [c for c in r.checks if c.status not in ("failed", "error")]
    assert r.passed  # skipped and warned do not fail a run


def test_report_files(tmp_path):
    folder = tmp_path / "reports" / "demo"
    files = write_reports(make_result(), folder)
    assert [f.name for f in files] == [
        "report.json",
        "junit.xml",
        "report.md",
        "latency_vs_concurrency.png",
        "throughput_vs_concurrency.png",
        "speedup_vs_concurrency.png",
        "acceptance_per_position.png",
    ]
    assert all(f.is_file() and f.parent == folder.absolute() for f in files)
    assert not [p for p in folder.parent.iterdir() if p.name.startswith(".")]

    data = json.loads((folder / "report.json").read_text())  # strict JSON: NaN became null, tuples lists
    assert data["passed"] is False and data["recipe"] == "demo"
    load = next(c for c in data["checks"] if c["name"] == "load")
    assert load["details"] == {"nan": None, "tuple": [1, 2]}
    assert data["baseline"] == {"http": "127.0.0.1:3", "grpc": None, "model": None, "metrics": None}

    root = ET.parse(folder / "junit.xml").getroot()
    suite = root.find("testsuite")
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors"), suite.get("skipped")) == (
        "7",
        "1",
        "1",
        "1",
    )
    cases = {c.get("name"): c for c in suite.findall("testcase")}
    assert list(cases) == ["health", "lossless", "sampling", "acceptance", "performance", "load", "bad_input"]
    assert cases["lossless"].find("failure").get("message") == "1/2 prompts differ"
    assert cases["lossless"].find("failure").get("type") == "validation.require_lossless"
    assert cases["bad_input"].find("error") is not None
    assert cases["sampling"].find("skipped") is not None
    assert cases["load"].find("system-out").text.startswith("WARNING:")
    assert cases["health"].find("failure") is None

    md = (folder / "report.md").read_text()
    assert "**Result: FAILED** (with warnings, below)" in md
    load_summary = next(c.summary for c in make_result().checks if c.name == "load")
    assert f"- ⚠️ warning: load: {load_summary}" in md
    assert json.loads((folder / "report.json").read_text())["warnings"] == [f"load: {load_summary}"]
    assert "| 1 | speculative | 4/4 | 200.0 | 4.00 | 20.0 / 30.0 / 40.0 |" in md
    assert "2.00×" in md and "0.88×" in md
    assert (
        "**Crossover:** speculation stops paying at concurrency ≈ 3.4: faster than the baseline at 1, 2, slower at 4"
        in md
    )
    assert "| accepted share | 0.750 | 0.500 | 0.250 |" in md
    assert "| p0 | token 5 | ' foo' | ' bar' |" in md
    assert "![Speedup vs concurrency](speedup_vs_concurrency.png)" in md
    for png in folder.glob("*.png"):
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def test_no_plots_without_data_and_old_report_replaced(tmp_path):
    folder = tmp_path / "r"
    write_reports(make_result(), folder)
    files = write_reports(make_result(with_plots=False), folder)
    assert sorted(p.name for p in folder.iterdir()) == ["junit.xml", "report.json", "report.md"]
    assert [f.name for f in files] == ["report.json", "junit.xml", "report.md"]


def test_a_failed_write_leaves_nothing_half_written(tmp_path, monkeypatch):
    import specbuild.validate.report as report

    def boom(result, folder):
        raise RuntimeError("disk full")

    monkeypatch.setattr(report, "write_junit", boom)
    with pytest.raises(RuntimeError):
        write_reports(make_result(), tmp_path / "r")
    assert list(tmp_path.iterdir()) == []


def test_terminal_tables(tmp_path):
    from rich.console import Console

    from specbuild.validate.report.terminal import print_result

    console = Console(record=True, width=160)
    print_result(make_result(), console)
    text = console.export_text()
    assert "lossless" in text and "failed" in text and "FAILED: lossless, bad_input" in text
    assert "speculative" in text and "2.00×" in text
    assert "WARNING load: " in text  # the verdict shows the checks that passed with a warning


def inconclusive_result(allowed: bool) -> ValidationResult:
    perf = make_result().check("performance").details
    perf = dict(
        perf,
        rounds=3,
        round_order="ABBA",
        machine_load={1: {"foreign_share": 0.4}},
        busy_threshold=0.25,
        speedup=[
            dict(p, speedup_min=p["speedup"] * 0.5, speedup_max=p["speedup"] * 2, rounds=[1, 2, 3])
            for p in perf["speedup"]
        ],
        gate_verdict={"status": "inconclusive", "why": "inconclusive: the rounds disagree", "foreign_share": 0.4},
    )
    mix = {
        "clients": 4,
        "seconds": 5.0,
        "models": ["ensemble", "tensorrt_llm_bls"],
        "concurrency": 4,
        "wall_s": 5.5,
        "sent": 40,
        "requests_per_s": 7.3,
        "lost": 1,
        "good": {"sent": 30, "equal": 29, "mixed": 0, "diverged": 0, "error": 0, "no answer": 1},
        "bad": {"sent": 10, "refused": 9, "answered": 1, "accepted": 0, "no answer": 0},
        "by_case": {"top_p above 1": {"sent": 2, "refused": 2, "answered": 0, "no answer": 0}},
        "by_model": {"ensemble": 20, "tensorrt_llm_bls": 20},
        "health": {"live": True, "not_ready": ["tensorrt_llm_bls"], "follow_up_failed": {}},
        "server": {
            "pid": 1,
            "alive": True,
            "stubs": ["a_0_0"],
            "stubs_died": ["tensorrt_llm_bls_0_0"],
            "rss_before_bytes": 2**30,
            "rss_after_bytes": 2**30 + 2**27,
            "rss_growth": 0.125,
        },
        "examples": {},
        "problems": ["1 request(s) lost", "python backend stub(s) died during the mix: x"],
    }
    checks = [
        CheckResult(
            "performance",
            "Performance",
            "inconclusive",
            "inconclusive: the rounds disagree",
            perf,
            gate="validation.min_speedup >= 1.3 at concurrency 1",
            inconclusive_allowed=allowed,
        ),
        CheckResult("load", "Load", "failed", "1 request(s) lost", mix),
    ]
    return ValidationResult(
        "demo",
        "eagle",
        "reference",
        Endpoints("127.0.0.1:1"),
        Endpoints("127.0.0.1:3"),
        "ensemble",
        checks,
        "2026-01-01T00:00:00+00:00",
        1.0,
        12,
    )


@pytest.mark.parametrize("allowed", [False, True])
def test_inconclusive_fails_unless_allowed_and_every_report_says_so(tmp_path, allowed):
    from rich.console import Console

    from specbuild.validate.report.terminal import print_result

    r = inconclusive_result(allowed)
    assert [c.name for c in r.failures] == (["load"] if allowed else ["performance", "load"])
    write_reports(r, tmp_path)
    data = json.loads((tmp_path / "report.json").read_text())
    perf = next(c for c in data["checks"] if c["name"] == "performance")
    assert perf["status"] == "inconclusive" and perf["inconclusive_allowed"] is allowed
    case = next(
        c for c in ET.parse(tmp_path / "junit.xml").getroot().iter("testcase") if c.get("name") == "performance"
    )
    failure = case.find("failure")
    assert (failure is not None and failure.get("type") == "inconclusive") is not allowed
    assert case.find("system-out").text.startswith("INCONCLUSIVE")
    md = (tmp_path / "report.md").read_text()
    assert "❔ inconclusive" in md and ("allowed by validation.allow_inconclusive" in md) is allowed
    assert "2.00× (1.00×–4.00×)" in md and "40% at concurrency 1" in md and "**Gate:** inconclusive" in md
    assert "RSS (server + stubs) 1024 MiB → 1152 MiB (+12.5%)" in md and "stubs died: tensorrt_llm_bls_0_0" in md
    assert (
        "NOT ready: tensorrt_llm_bls" in md and "| top_p above 1 | 2 | 2 | 0 |  | 0 |" in md
    )  # no "ended": a case its client does not end
    console = Console(record=True, width=140)
    print_result(r, console)
    text = console.export_text()
    assert "inconclusive" in text and "2.00× (1.00×–4.00×)" in text


LONG = (
    "1 answer diverged from the baseline under load: "
    + "; ".join(f"client {i} sent prompt coding-function-{i} and read a different continuation" for i in range(14))
    + "; the server stayed live and every model ready"
)  # a summary as long as the (about 1,050 characters)


def squeezed(text: str) -> str:
    """Text without whitespace or table borders: a folded cell reads as its whole text again."""
    return "".join(ch for ch in text if not ch.isspace() and ch not in "│┃┆|")


def test_on_a_pipe_every_line_of_the_tables_fits_the_log_and_no_text_is_cut(monkeypatch, capsys):
    """Issue #39 item 6: captured stdout is a pipe; COLUMNS unset gives 160 columns, a summary of ~1,050 characters
    folds inside its cell, nothing is cut with '…', and report.json keeps the text whole."""
    from specbuild.output.console import make_console
    from specbuild.validate.report.terminal import print_result

    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    result = make_result()
    result.checks = [c if c.name != "load" else CheckResult("load", "Load", "warned", LONG) for c in result.checks]
    assert len(LONG) > 1000
    print_result(result, make_console())
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= 160, max(lines, key=len)
    assert "…" not in out
    table = out[: out.index("performance: p50")]
    assert squeezed(LONG) in squeezed(table)  # the folded cell, whole
    assert squeezed(f"WARNING load: {LONG}") in squeezed(out[out.index("WARNING load:") :])  # the wrapped line
    assert next(c for c in result.to_dict()["checks"] if c["name"] == "load")["summary"] == LONG

    monkeypatch.setenv("COLUMNS", "72")  # a narrower log asks for it
    print_result(result, make_console())
    narrow = capsys.readouterr().out
    assert max(len(line) for line in narrow.splitlines()) <= 72 and "…" not in narrow


def test_report_md_keeps_long_cells_whole(tmp_path):
    """No cell of report.md is cut: the bad-input table's message was cut at 100 characters, mid-word."""
    message = "input 'temperature' is -1: " + "the sampling temperature must be finite and non-negative; " * 4
    result = make_result()
    result.checks.append(
        CheckResult(
            "bad_input",
            "Bad input",
            "passed",
            "refused",
            {"cases": [{"case": "temperature", "expect": "refused", "outcome": "refused", "message": message}]},
        )
    )
    write_reports(result, tmp_path / "r")
    md = (tmp_path / "r" / "report.md").read_text()
    assert f"| temperature | refused | refused |  | {message} |" in md


def sweep(values: dict[int, float]) -> dict:
    from specbuild.validate.aggregate import Speedup, crossover

    return crossover([Speedup(c, v, 1.0) for c, v in values.items()]).to_dict()


def test_the_crossover_says_where_speculation_is_slower_and_where_faster():
    """Issue #39 item 7: 'speculation stops paying at concurrency 1' was said of a deployment faster from 4 on."""
    from specbuild.validate.report import markdown

    later = sweep({1: 0.8, 2: 0.95, 4: 1.2, 8: 1.3, 16: 1.1})
    line = markdown._crossover_line({"crossover": later})
    assert line.startswith("Speculation is slower than the baseline at concurrency 1, 2; faster at 4, 8, 16")
    assert "stops" not in markdown.crossover_text(later)
    falls = sweep({1: 2.0, 2: 1.5, 4: 0.9, 8: 0.7})
    assert markdown.crossover_text(falls).startswith("speculation stops paying at concurrency ≈ 3.")
    assert markdown.crossover_text(falls).endswith(": faster than the baseline at 1, 2, slower at 4, 8")
    assert markdown._crossover_line({"crossover": falls}).startswith("**Crossover:** speculation stops paying")
    assert markdown.crossover_text(sweep({1: 1.5, 4: 1.1})) == (
        "faster than the baseline at every concurrency level measured"
    )
    assert markdown.crossover_text(sweep({1: 0.5, 4: 0.9})) == (
        "slower than the baseline at every concurrency level measured"
    )


def test_the_sweep_says_how_the_deployments_took_turns(tmp_path):
    result = make_result()
    perf = result.check("performance").details
    perf.update(rounds=3, round_order="ABBA")
    write_reports(result, tmp_path / "r")
    md = (tmp_path / "r" / "report.md").read_text()
    assert "Each level ran 3 rounds, the deployments taking turns in ABBA order (odd rounds reversed" in md
    assert "(ABBA" not in md


def test_the_per_request_chart_names_each_prompt(monkeypatch, tmp_path):
    """Issue #39 item 7: without per-step sizes the acceptance plot shows AL per request, labelled 0-10 until now."""
    from specbuild.validate.report import plots

    plt = plots._pyplot()
    figures = []
    monkeypatch.setattr(plt, "close", figures.append)
    details = make_result().check("acceptance").details
    details = dict(details, per_position=None, histogram=None, per_position_note="no request gave its steps")
    details["records"] = [
        dict(details["records"][0], prompt=name, category=cat, prompt_index=i)
        for i, (name, cat) in enumerate((("coding-function", "coding"), ("writing-email", "writing")))
    ]
    plots.acceptance_plot(plt, details, tmp_path / "a.png", "demo")
    (figure,) = figures
    labels = [t.get_text() for t in figure.axes[-1].get_xticklabels()]
    assert labels == ["coding-function (coding)", "writing-email (writing)"]
    assert any("no request gave its steps" in t.get_text() for t in figure.axes[0].texts)


def test_a_reused_verdict_says_its_duration_is_the_earlier_runs(tmp_path):
    """Issue #39 item 7: a second compile that reuses the verdict printed '(12.5 s)' as if it had validated."""
    from rich.console import Console

    from specbuild.cache.step_cache import reuse_verdict
    from specbuild.output.commands import _validation_summary
    from specbuild.output.steps import Stages

    result = make_result()
    result.checks = [c for c in result.checks if c.status not in ("failed", "error")]
    write_reports(result, tmp_path / "r")
    console = Console(record=True, width=160)
    stages = Stages(console, background=False)
    assert reuse_verdict(tmp_path / "r", stages, console) == 0
    text = console.export_text()
    assert "PASSED  (the verdict of an earlier run, started 2026-01-01T00:00:00+00:00, which took 12.5 s)" in text
    assert "(12.5 s)" not in text
    said = _validation_summary(stages.validation)  # compile --json's "validation"
    assert said["reused"] is True and said["started"] == "2026-01-01T00:00:00+00:00" and said["duration_s"] == 12.5
