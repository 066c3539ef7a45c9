"""A Markdown table: report.md's (markdown.py) and the cost model's (cost_model.py).

Cells are kept whole, never cut: a renderer (GitHub, an editor's preview) wraps a table cell between words to the
width the page gives the column, so a long summary reads as a paragraph there. Breaks of our own (`<br>` every N
characters) would be placed for a page width we do not know: on a wide page they leave ragged short lines, on a
narrow one they add breaks to the renderer's. A cell's own line breaks become spaces (a Markdown row is one line);
report.json holds every text as it was."""

from __future__ import annotations

from typing import Any, Iterable


def _cell(value: Any) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def table(header: list[str], rows: Iterable[list[Any]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in rows]
    return out + [""]
