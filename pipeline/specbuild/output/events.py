"""`--log-format json`: one JSON object per line on stderr, for CI log processors (docs/machine-output.md).

Every event has `event` (its kind), `time` (UTC, ISO 8601) and `command`; the kinds are

    step.started   step                     a step of a long command began
    step.progress  step, elapsed_s, message a steady heartbeat while it runs (and what it last said)
    step.finished  step, status, duration_s status: done | failed | interrupted
    warning        message (+ file, line, col, field for a recipe's)
    notice         message                  something the command says along the way
    error          message, exit_code       the command stopped: a user error (2) or an internal one (1)
    finished       exit_code                the command's last event

With `--log-format text` (the default) nothing here is printed: the people's output is.
"""

from __future__ import annotations

import datetime as _dt
import json
import sys
from dataclasses import dataclass
from typing import Any, Callable, TextIO

LOG_FORMATS = ("text", "json")


@dataclass
class EventLog:
    """Writes events as JSON lines (enabled) or drops them (disabled: `--log-format text`)."""

    enabled: bool = False
    command: str | None = None
    stream: TextIO | None = None  # default: sys.stderr at the time of writing
    now: Callable[[], _dt.datetime] = lambda: _dt.datetime.now(_dt.timezone.utc)

    def emit(self, event: str, **fields: Any) -> None:
        if not self.enabled:
            return
        record = {
            "event": event,
            "time": self.now().isoformat(timespec="milliseconds"),
            "command": self.command,
            **fields,
        }
        stream = self.stream or sys.stderr
        stream.write(json.dumps(record, default=str) + "\n")
        stream.flush()


# The command line's event log: configured once per run by the `specbuild` group (`--log-format`).
_LOG = EventLog()


def configure(log_format: str, command: str | None = None) -> EventLog:
    global _LOG
    _LOG = EventLog(enabled=log_format == "json", command=command)
    return _LOG


def current() -> EventLog:
    return _LOG
