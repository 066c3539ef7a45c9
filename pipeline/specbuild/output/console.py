"""Rich consoles for the command line.

On a terminal, rich's defaults. When the stream is not a terminal (a pipe, a CI log, a file) every line fits the
log's width: `COLUMNS` when set, else LOG_WIDTH (rich would fall back to 80). Tables fold their cells there (a long
summary goes on in the lines below, never cut with `…`), and text lines wrap between words; the whole text of
every table is in the command's JSON (`--json`, report.json). A console made with `soft_wrap=True` keeps its lines
whole instead: the `serve` banner, whose lines scripts read and people copy (addresses, a key, a command). Colours
follow rich's environment rules: `NO_COLOR` (https://no-color.org) turns them off, `FORCE_COLOR` forces them; a
pipe gets none.
"""

from __future__ import annotations

import os
from typing import Any

from rich.console import Console

# A log's width when COLUMNS does not say: wide enough for the compact tables (performance, cost model) and a few
# words of each summary per line, narrow enough to read in a CI log viewer.
LOG_WIDTH = 160


class LogConsole(Console):
    """A console on a stream that is not a terminal: every line it prints fits its width. A print that asks for
    soft wrapping (a terminal would wrap the line itself) is wrapped here, between words, unless the console was
    made to keep its lines whole."""

    def __init__(self, *, keep_lines: bool = False, **kwargs: Any) -> None:
        super().__init__(soft_wrap=keep_lines, **kwargs)
        self.keep_lines = keep_lines

    def print(self, *objects: Any, **kwargs: Any) -> None:
        if not self.keep_lines:
            kwargs["soft_wrap"] = False
        super().print(*objects, **kwargs)


def make_console(*, stderr: bool = False, quiet: bool = False, soft_wrap: bool = False) -> Console:
    """A console on stdout (or stderr); on a stream that is not a terminal, a LogConsole as wide as `COLUMNS`, else
    LOG_WIDTH. soft_wrap: lines are never wrapped (on a log too)."""
    console = Console(stderr=stderr, quiet=quiet, soft_wrap=soft_wrap)
    if console.is_terminal:
        return console
    width = None if os.environ.get("COLUMNS") else LOG_WIDTH  # rich reads COLUMNS itself
    return LogConsole(stderr=stderr, quiet=quiet, keep_lines=soft_wrap, width=width)
