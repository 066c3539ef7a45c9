"""What a specbuild process (or this test process) leaves behind: its marked processes, its /dev/shm regions, the
ports its servers listened on."""

from __future__ import annotations

import glob
import os
import socket
import time
from pathlib import Path
from typing import Callable

from specbuild import child_watchdog


def alive(pid: int) -> bool:
    """Running: a zombie (ended, not yet collected) is not."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2:][:1] not in ("Z", "X")


def marked_processes(owner: int, tag: str | None = None) -> list[int]:
    """Processes started (directly or not) by specbuild process `owner`: they carry SPECBUILD_OWNER=<owner>."""
    return child_watchdog.marked(owner, tag)


def shm_entries(owner: int, tag: str = "*") -> list[str]:
    return sorted(glob.glob(child_watchdog.shm_glob(owner, tag)))


def listening(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as s:
        s.settimeout(1.0)
        return s.connect_ex((host, port)) == 0


def eventually(condition: Callable[[], bool], timeout_s: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return condition()
