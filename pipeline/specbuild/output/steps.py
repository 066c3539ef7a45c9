"""The steps of a long command (compile's engines, repositories, serve, validate), shown and recorded.

On a terminal a spinner shows the running step; in a log (stream not a terminal) a line
`… <step>: running for <n> s[: <what it last said>]` is printed every `interval` seconds (default 15,
$SPECBUILD_PROGRESS_INTERVAL), so a CI log shows life during a minute-long step. Each finished step prints one
line `✓ <step> (<s> s)`, is recorded for `--json` (`steps`) and, with `--log-format json`, becomes events
(specbuild.output.events). The clock and the wait are injectable: tests drive them without sleeping.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from rich.console import Console

from specbuild.output.events import EventLog, current

INTERVAL_ENV = "SPECBUILD_PROGRESS_INTERVAL"
DEFAULT_INTERVAL_S = 15.0

Clock = Callable[[], float]
# wait(seconds) -> True when the step has finished (threading.Event.wait's contract)
Wait = Callable[[float], bool]


def progress_interval() -> float:
    """Seconds between progress lines in a log: $SPECBUILD_PROGRESS_INTERVAL, else 15."""
    raw = os.environ.get(INTERVAL_ENV)
    try:
        value = float(raw) if raw else DEFAULT_INTERVAL_S
    except ValueError:
        value = DEFAULT_INTERVAL_S
    return value if value > 0 else DEFAULT_INTERVAL_S


@dataclass
class StepRecord:
    name: str
    status: str = "running"  # done | failed | interrupted | reused (Stages.reused)
    duration_s: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": self.status,
            "duration_s": None if self.duration_s is None else round(self.duration_s, 3),
        }


class Heartbeat:
    """Emits `line(elapsed_s, message)` whenever `interval` seconds have passed since the last one."""

    def __init__(self, emit: Callable[[float, str | None], None], clock: Clock, interval: float):
        self.emit, self.clock, self.interval = emit, clock, interval
        self.started = self.next_due = clock()
        self.next_due += interval
        self.message: str | None = None
        self.closed = False  # the step ended: a straggler thread's update prints nothing after it
        self._lock = threading.Lock()

    def update(self, message: str) -> None:
        self.message = message
        self.beat()

    def close(self) -> None:
        with self._lock:
            self.closed = True

    def beat(self) -> None:
        with self._lock:
            if self.closed:
                return
            now = self.clock()
            if now < self.next_due:
                return
            while self.next_due <= now:  # steady: one line per interval, never a burst after a stall
                self.next_due += self.interval
            self.emit(now - self.started, self.message)  # under the lock: close() waits for a line being printed

    def run(self, wait: Wait) -> None:
        """Beat until `wait` says the step finished (a background thread runs this during a step)."""
        while not wait(self.interval / 4):
            self.beat()


@dataclass
class Stages:
    """Prints one line per finished step, a spinner (terminal) or steady progress lines (log) while one runs,
    and records every step for `--json`."""

    console: Console
    events: EventLog | None = None
    clock: Clock = time.monotonic
    interval: float | None = None
    background: bool = True  # a thread beats during silent steps (tests beat by hand with a fake clock)
    steps: list[StepRecord] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)
    validation: Any = None  # compile's ValidationResult, once validated

    def __post_init__(self) -> None:
        if self.events is None:
            self.events = current()
        if self.interval is None:
            self.interval = progress_interval()

    @property
    def live(self) -> bool:
        """A spinner is shown (a terminal, not --log-format json)."""
        return self.console.is_terminal and not self.events.enabled

    @contextlib.contextmanager
    def stage(self, title: str, *, spinner: bool = True) -> Iterator[Callable[[str], None]]:
        """Run one step: yields its progress callback (message). `spinner=False` for a step that shows its own
        live display on a terminal (rich allows one at a time)."""
        record = StepRecord(title)
        self.steps.append(record)
        start = self.clock()
        self.events.emit("step.started", step=title)
        heartbeat = Heartbeat(
            lambda elapsed, message: self._progress_line(title, elapsed, message), self.clock, self.interval
        )
        finished = threading.Event()
        beater = None
        if not self.live and self.background:
            beater = threading.Thread(
                target=heartbeat.run, args=(finished.wait,), daemon=True, name=f"progress {title}"
            )
            beater.start()
        try:
            if self.live and spinner:
                with self.console.status(title) as status:

                    def progress(message: str) -> None:
                        status.update(f"{title}: {message}")

                    yield progress
            else:
                yield heartbeat.update
        except BaseException as e:
            record.status = "interrupted" if isinstance(e, KeyboardInterrupt) else "failed"
            raise
        else:
            record.status = "done"
        finally:
            finished.set()
            heartbeat.close()
            if beater is not None:
                beater.join()
            record.duration_s = self.clock() - start
            self.events.emit("step.finished", step=title, status=record.status, duration_s=round(record.duration_s, 3))
        self.console.print(f"[green]✓[/green] {title} [dim]({record.duration_s:.1f} s)[/dim]", soft_wrap=True)

    def reused(self, title: str, why: str) -> None:
        """A step whose output is already in place, made from the same inputs (specbuild.cache.step_cache)."""
        self.steps.append(StepRecord(title, "reused", 0.0))
        self.events.emit("step.reused", step=title, why=why)
        self.console.print(f"[cyan]↺[/cyan] {title}: reused ({why})", soft_wrap=True)

    def _progress_line(self, title: str, elapsed: float, message: str | None) -> None:
        self.events.emit("step.progress", step=title, elapsed_s=round(elapsed, 1), message=message)
        said = f": {message}" if message else ""
        self.console.print(f"… {title}: running for {elapsed:.0f} s{said}", soft_wrap=True, highlight=False)

    def notice(self, message: str) -> None:
        self.notices.append(message)
        self.events.emit("notice", message=message)
        self.console.print(f"[yellow]![/yellow] {message}", soft_wrap=True)

    def to_list(self) -> list[dict[str, Any]]:
        return [s.to_dict() for s in self.steps]
