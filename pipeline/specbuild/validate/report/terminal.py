"""What a person sees on the terminal: a progress bar while the suite runs, then rich tables."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

from specbuild.validate.report.markdown import PERF_HEADER, performance_rows

STYLE = {"passed": "green", "failed": "bold red", "error": "bold red", "warned": "yellow", "skipped": "dim"}


@contextmanager
def progress_bar(console) -> Iterator:
    """A rich Progress on `console` (stderr); yields the suite's progress callback (stage, done, total)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=console, transient=True) as progress:
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

    checks = Table(title=f"specbuild validate — {result.recipe} ({result.method}, {result.runtime})",
                   show_lines=False, expand=False)
    for col in ("check", "status", "summary"):
        checks.add_column(col, overflow="fold")
    for c in result.checks:
        checks.add_row(c.name, f"[{STYLE.get(c.status, '')}]{c.status}[/]", c.summary)
    console.print(checks)
    perf = result.check("performance")
    if perf is not None and perf.details.get("levels"):
        table = Table(title="performance (greedy, closed loop)")
        for col in PERF_HEADER:
            table.add_column(col, justify="right" if col not in ("deployment",) else "left")
        for row in performance_rows(perf.details):
            table.add_row(*[str(v) for v in row])
        console.print(table)
    verdict = "[bold green]PASSED[/]" if result.passed else "[bold red]FAILED[/]"
    failing = ", ".join(c.name for c in result.failures)
    console.print(f"{verdict}" + (f": {failing}" if failing else "") + f"  ({result.duration_s:.1f} s)")
    if result.report_files:
        console.print(f"report: {result.report_files[0].parent}")
