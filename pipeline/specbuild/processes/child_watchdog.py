"""The watchdog that removes what specbuild's children leave when specbuild dies, even by SIGKILL.

Started once per specbuild process (by `specbuild.processes.children`), in its own session, with a pipe from its owner on
stdin. Every child specbuild starts carries SPECBUILD_OWNER=<owner pid> in its environment, and so does whatever
that child starts (tritonserver's python backend stubs, mpirun's ranks, trtllm-build's workers). The
owner's children also get SIGKILL from the kernel when the owner dies (prctl PR_SET_PDEATHSIG), but their own
children do not, and the python backend's shared-memory regions (/dev/shm/<shm-region-prefix-name>*) outlive
every process. So, when the pipe reaches end of file or the watchdog is re-parented (the owner is gone), it
kills every process marked with the owner's pid, waits for them to go, removes the owner's /dev/shm regions
(`shm_glob(owner)`), and exits. When the owner exits cleanly there is normally nothing left to remove.

Standard library only, and no import of specbuild: it runs as `python -I -S child_watchdog.py OWNER_PID`, and its
functions are imported by `specbuild.processes.children` for the same clean-up while the owner lives.
"""

from __future__ import annotations

import glob
import os
import select
import signal
import sys
import time

OWNER_VAR = "SPECBUILD_OWNER"  # <pid of the specbuild process that started the child>
CHILD_VAR = "SPECBUILD_CHILD"  # <tag of the child>, unique within its owner
SHM_DIR = "/dev/shm"


def shm_prefix(owner: int, tag: str) -> str:
    """The python backend's shm-region-prefix-name of a server: unique, and found again from the owner's pid."""
    return f"specbuild_{owner}_{tag}_"


def shm_glob(owner: int, tag: str = "*") -> str:
    return os.path.join(SHM_DIR, shm_prefix(owner, tag) + "*")


def _environ(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f.read()
    except OSError:  # gone, or not ours
        return b""


def _alive(pid: int) -> bool:
    """Running (a zombie has ended: its parent only has not collected it yet)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2 :][:1] not in (b"Z", b"X")


def marked(owner: int, tag: str | None = None) -> list[int]:
    """Live processes whose environment carries SPECBUILD_OWNER=<owner> (and SPECBUILD_CHILD=<tag> if given)."""
    owner_entry = f"{OWNER_VAR}={owner}".encode()
    tag_entry = f"{CHILD_VAR}={tag}".encode() if tag is not None else None
    me = os.getpid()
    found = []
    try:
        names = os.listdir("/proc")
    except OSError:  # no procfs (not Linux): the death signal and the process groups are all there is
        return found
    for name in names:
        if not name.isdigit() or int(name) == me:
            continue
        entries = _environ(int(name)).split(b"\0")
        if owner_entry in entries and (tag_entry is None or tag_entry in entries) and _alive(int(name)):
            found.append(int(name))
    return found


def kill_marked(owner: int, tag: str | None = None, wait_s: float = 10.0) -> int:
    """SIGKILL every marked process and wait until they are gone. Returns how many were killed."""
    killed: set[int] = set()
    deadline = time.monotonic() + wait_s
    while True:
        pids = marked(owner, tag)
        if not pids or time.monotonic() > deadline:
            return len(killed)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
            except OSError:
                pass
        time.sleep(0.05)


def remove_shm(pattern: str) -> int:
    removed = 0
    for path in glob.glob(pattern):
        try:
            os.unlink(path)
            removed += 1
        except OSError:
            pass
    return removed


def clean_up(owner: int) -> None:
    kill_marked(owner)
    remove_shm(shm_glob(owner))


def watch(owner: int, stdin_fd: int = 0) -> None:
    """Return once the owner is gone (end of file on the pipe, or re-parented), having cleaned up after it."""
    while True:
        try:
            readable, _, _ = select.select([stdin_fd], [], [], 1.0)
        except InterruptedError:  # pragma: no cover - a signal during select
            continue
        if readable:
            try:
                data = os.read(stdin_fd, 4096)
            except OSError:
                data = b""
            if not data:
                break
        elif os.getppid() != owner:  # the owner died while a process it forked keeps the pipe open
            break
    clean_up(owner)


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # only the owner's end ends the watchdog
    owner = int(argv[1])
    watch(owner)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
