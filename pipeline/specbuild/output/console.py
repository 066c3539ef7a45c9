"""Rich consoles for the command line.

On a terminal, rich's defaults. When the stream is not a terminal (a pipe, a CI log, a file) rich falls back to
80 columns and cuts or folds tables there: these consoles render at the full width of what they print instead,
unless `COLUMNS` is set, which then wins (a narrow log viewer can ask for it). Colours follow rich's environment
rules: `NO_COLOR` (https://no-color.org) turns them off, `FORCE_COLOR` forces them; a pipe gets none.
"""

from __future__ import annotations

import os

from rich.console import Console

# Wide enough that no table row is ever cut; tables are not expanded, so a table takes only the width it needs.
PIPE_WIDTH = 10_000


def make_console(*, stderr: bool = False, quiet: bool = False, soft_wrap: bool = False) -> Console:
    """A console on stdout (or stderr) that never cuts a table when the stream is not a terminal."""
    console = Console(stderr=stderr, quiet=quiet, soft_wrap=soft_wrap)
    if not console.is_terminal and not os.environ.get("COLUMNS"):
        console = Console(stderr=stderr, quiet=quiet, soft_wrap=soft_wrap, width=PIPE_WIDTH)
    return console
