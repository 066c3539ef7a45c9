"""Run a tool as a child process: output to a log file and the progress callback, the last lines kept for errors.

The child runs in its own process group, so an interrupt (Ctrl-C, SIGTERM to specbuild) ends it and everything
it started (trtllm-build's parallel workers) before the caller cleans up; it and its workers also die when
specbuild is killed (specbuild.processes.children: death signal and watchdog).
"""

from __future__ import annotations

import collections
import os
import shlex
import signal
import subprocess
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from specbuild.processes import children
from specbuild.processes.signals import Terminated

Progress = Callable[[str], None]
TAIL_LINES = 25


@dataclass
class ChildResult:
    returncode: int
    stderr_tail: list[str]
    output_tail: list[str]

    @property
    def failure(self) -> str:
        """How the child ended, in words."""
        if self.returncode < 0:
            sig = -self.returncode
            try:
                name = signal.Signals(sig).name
            except ValueError:
                name = str(sig)
            hint = " (killed from outside — out of memory?)" if sig == signal.SIGKILL else ""
            return f"was killed by signal {name}{hint}"
        return f"exited with status {self.returncode}"

    def tail(self) -> str:
        """The last lines of stdout and stderr together (TensorRT-LLM logs errors to stdout, tracebacks to stderr)."""
        lines = self.output_tail or self.stderr_tail
        return "\n".join("    " + ln for ln in lines) if lines else "    (no output)"


class Interrupted(Terminated):
    """SIGTERM while a child runs; handled like Ctrl-C (the CLI prints "terminated" and exits 143)."""


@contextmanager
def sigterm_raises() -> Iterator[None]:
    """Turn SIGTERM into an exception in the main thread for the duration (so cleanup runs)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # once: let the clean-up finish
        raise Interrupted()

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _pump(
    stream,
    log,
    keep: collections.deque,
    also: collections.deque | None,
    progress: Progress | None,
    prefix: str,
    lock: threading.Lock,
) -> None:
    for raw in iter(stream.readline, ""):
        line = raw.rstrip("\n")
        with lock:
            log.write(raw)
            log.flush()
            keep.append(line)
            if also is not None:
                also.append(line)
        if progress is not None and line.strip():
            progress(f"{prefix}{line.strip()[:160]}")
    stream.close()


def stop_group(proc: subprocess.Popen, grace_s: float = 10.0) -> None:
    """SIGTERM the child's process group, then SIGKILL what is left after grace_s."""
    if proc.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 30.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def run_child(
    argv: list[str],
    log_path: Path,
    *,
    progress: Progress | None = None,
    prefix: str = "",
    env: dict | None = None,
    cwd: Path | None = None,
) -> ChildResult:
    """Run argv to completion. On an interrupt the child's group is stopped and the interrupt re-raised."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    stderr_tail: collections.deque = collections.deque(maxlen=TAIL_LINES)
    output_tail: collections.deque = collections.deque(maxlen=TAIL_LINES)
    lock = threading.Lock()
    with open(log_path, "w") as log:
        log.write(f"$ {shlex.join(argv)}\n")
        log.flush()
        tag = children.new_tag()
        proc = children.spawn(
            argv,
            tag=tag,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            errors="replace",
            env=env,
            cwd=cwd,
            bufsize=1,
        )
        pumps = [
            threading.Thread(
                target=_pump, args=(proc.stdout, log, output_tail, None, progress, prefix, lock), daemon=True
            ),
            threading.Thread(
                target=_pump, args=(proc.stderr, log, stderr_tail, output_tail, progress, prefix, lock), daemon=True
            ),
        ]
        for t in pumps:
            t.start()
        try:
            proc.wait()
        except BaseException:
            stop_group(proc)
            raise
        finally:
            children.stop_leftovers(tag)  # leave no orphaned workers behind
            for t in pumps:
                t.join(timeout=5)
    return ChildResult(proc.returncode, list(stderr_tail), list(output_tail))
