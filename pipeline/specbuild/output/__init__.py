"""What specbuild prints, for people and for machines (docs/machine-output.md).

- `console`: rich consoles whose lines fit a log's width (tables folded, never cut) when the output is not a
  terminal, and honour NO_COLOR.
- `events`: `--log-format json`, one JSON event per line on stderr.
- `steps`: the steps of a long command: a spinner on a terminal, a progress line at a steady interval in a log.
- `document`: the one JSON shape of `--json` (steps, findings, outputs, verdict) shared by every command.
"""
