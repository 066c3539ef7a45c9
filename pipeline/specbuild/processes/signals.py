"""SIGTERM (what CI runners, `timeout` and Kubernetes send) is handled like Ctrl-C: an exception in the main thread,
so that every `with`/`finally` on the way out runs (servers stopped, partial output removed). The CLI then exits
143 (128 + SIGTERM) where Ctrl-C exits 130.

    with sigterm_raises():
        ...            # SIGTERM here raises Terminated (a KeyboardInterrupt: code that handles Ctrl-C handles it)

A second SIGTERM while that clean-up runs is ignored (it would abort the clean-up half-way); SIGKILL is the way to
insist, and the children's watchdog (specbuild.processes.children) then removes what is left.
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Iterator

EXIT_SIGINT = 128 + signal.SIGINT  # 130
EXIT_SIGTERM = 128 + signal.SIGTERM  # 143


class Terminated(KeyboardInterrupt):
    """specbuild received SIGTERM."""


def _raise_terminated(signum, frame) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # once: let the clean-up finish
    raise Terminated()


@contextmanager
def sigterm_raises() -> Iterator[None]:
    """For the duration, SIGTERM raises Terminated in the main thread (elsewhere: nothing changes)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
