"""What a person sees on the terminal: a progress bar while the suite runs, then rich tables."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

from specbuild.validate.report.cost_model import terminal_table
from specbuild.validate.report.markdown import speedup_range_text


STYLE = {
    "passed": "green",
    "failed": "bold red",
    "error": "bold red",
    "warned": "yellow",
    "skipped": "dim",
    "inconclusive": "bold magenta",
}


@contextmanager
def progress_bar(console) -> Iterator:
    """A rich Progress on `console` (stderr); yields the suite's progress callback (stage, done, total)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    with Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as progress:
        tasks: dict[str, int] = {}

        def update(stage: str, done: int, total: int) -> None:
            if stage not in tasks:
                for other in tasks.values():  # one stage runs at a time: hide the finished ones
                    progress.update(other, visible=False)
                tasks[stage] = progress.add_task(stage, total=total or None)
            progress.update(tasks[stage], completed=done, total=total or None)

        yield update


def print_result(result, console) -> None:
    from rich.table import Table

    checks = Table(
        title=f"specbuild validate — {result.recipe} ({result.method}, {result.runtime})",
        show_lines=False,
        expand=False,
    )
    for col in ("check", "status", "summary"):
        checks.add_column(col, overflow="fold")
    for c in result.checks:
        status = c.status + (" (allowed)" if c.status == "inconclusive" and c.ok else "")
        checks.add_row(c.name, f"[{STYLE.get(c.status, '')}]{status}[/]", c.summary)
    console.print(checks)
    perf = result.check("performance")
    if perf is not None and perf.details.get("levels"):
        console.print(performance_table(perf.details))
    cost = result.check("cost_model")
    if cost is not None and cost.details.get("levels"):
        console.print(terminal_table(cost.details))
    verdict = "[bold green]PASSED[/]" if result.passed else "[bold red]FAILED[/]"
    failing = ", ".join(c.name for c in result.failures)
    console.print(f"{verdict}" + (f": {failing}" if failing else "") + f"  ({duration_text(result)})")
    for c in result.warnings:
        console.print(f"[yellow]WARNING[/] {c.name}: {c.summary}", soft_wrap=True)


def duration_text(result) -> str:
    """How long the validation took — said to be an earlier run's, with when it started, when the verdict is
    reused from that run's report (this run validated nothing)."""
    if result.reused:
        return f"the verdict of an earlier run, started {result.started}, which took {result.duration_s:.1f} s"
    return f"{result.duration_s:.1f} s"


def _ms(dist: dict | None) -> str:
    return f"{dist['p50'] * 1000:.1f}" if dist else "–"


def performance_table(details: dict):
    """A compact table (fits 80 columns): p50s and the request latency's p99; report.md has every percentile."""
    from rich import box
    from rich.table import Table

    levels = details["levels"]
    errors = sum(s["errors"] for vs in levels.values() for s in vs)
    title = "performance: p50 unless said" + (f" — {errors} request(s) FAILED" if errors else "")
    table = Table(title=title, box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False, show_edge=False)
    for col in ("c", "deployment", "tok/s", "req/s", "TTFT ms", "ITL ms", "lat s", "p99 s", "speedup"):
        table.add_column(col, justify="left" if col == "deployment" else "right", overflow="fold")
    speed = {p["concurrency"]: p for p in details.get("speedup", [])}
    for c in sorted({s["concurrency"] for vs in levels.values() for s in vs}):
        for dep, vs in levels.items():
            s = next((x for x in vs if x["concurrency"] == c), None)
            if s is None:
                continue
            lat = s["latency_s"]
            sp = speed.get(c) if dep == "speculative" else None
            table.add_row(
                str(c),
                dep,
                f"{s['output_tokens_per_s']:.1f}",
                f"{s['requests_per_s']:.2f}",
                _ms(s["ttft_s"]),
                _ms(s["itl_s"]),
                f"{lat['p50']:.3f}" if lat else "–",
                f"{lat['p99']:.3f}" if lat else "–",
                speedup_range_text(sp),
            )
    return table
