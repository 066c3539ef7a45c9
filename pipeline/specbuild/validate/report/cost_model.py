"""The cost model's table (the `cost_model` check's details) for report.md and the terminal."""

from __future__ import annotations

from typing import Any

from specbuild.validate.report.markdown_table import table

HEADER = [
    "concurrency",
    "t(1) ms",
    "t(verify) ms",
    "t(draft) ms",
    "AL",
    "limit",
    "in process (share)",
    "served (share)",
]


def _times(value: float | None, share: float | None = None) -> str:
    if value is None:
        return "–"
    return f"{value:.2f}×" + (f" ({share:.2f})" if share is not None else "")


def rows(details: dict) -> list[list[Any]]:
    return [
        [
            x["concurrency"],
            f"{x['t1_ms']:.2f}",
            f"{x['verify_ms']:.2f}",
            f"{x['draft_ms']:.2f}",
            f"{x['acceptance_length']:.2f}",
            _times(x["limit"]),
            _times(x["in_process"], x["in_process_share_of_limit"]),
            _times(x["served"], x["served_share_of_limit"]),
        ]
        for x in details.get("levels", [])
    ]


def markdown_lines(details: dict) -> list[str]:
    lines = [
        f"What this method's calls allow on this machine: `{details['formula']}`, from per-call costs measured "
        f"in process ({details['measured']}), beside the speedup measured in process (the same runs) and "
        "served (the performance sweep); share = measured / limit. t(1): the target's forward in an "
        "autoregressive step; t(verify): in a speculative step; t(draft): a step's drafting.",
        "",
    ]
    return lines + table(HEADER, rows(details))


def terminal_table(details: dict):
    from rich import box
    from rich.table import Table

    out = Table(
        title=f"cost model: {details['formula']} (share = measured / limit)",
        box=box.SIMPLE_HEAD,
        padding=(0, 1),
        pad_edge=False,
        show_edge=False,
    )
    for col in ("c", "t(1) ms", "verify ms", "draft ms", "AL", "limit", "in process", "served"):
        out.add_column(col, justify="right", overflow="fold")  # folded, never cut, on a narrow log
    for row in rows(details):
        out.add_row(*(str(v) for v in row))
    return out
