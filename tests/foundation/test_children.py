"""specbuild.processes.children: whatever specbuild starts — and whatever that starts — ends when specbuild ends, however it
ends; the python backend's /dev/shm regions of its servers go too. A stand-in owner process starts `bash`, which
starts a `sleep` of its own (a grandchild: no death signal reaches it, only the watchdog)."""

from __future__ import annotations

import glob
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from specbuild.processes import child_watchdog

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.timeout(120)

OWNER = textwrap.dedent("""
    import sys, time
    from specbuild.processes import children
    tag = children.new_tag()
    proc = children.spawn(["bash", "-c", "sleep 300 & sleep 301"], tag=tag)
    open("/dev/shm/" + children.shm_prefix(tag) + "region", "w").close()  # as a python backend would
    print(proc.pid, flush=True)
    if sys.argv[1] == "exit":
        sys.stdin.readline()
        sys.exit(0)  # forgets to stop its child
    time.sleep(300)
""")


def _owner(how: str) -> tuple[subprocess.Popen, int]:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "pipeline"))
    proc = subprocess.Popen(
        [sys.executable, "-c", OWNER, how], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
    )
    child = int(proc.stdout.readline())
    return proc, child


def _eventually(condition, timeout_s: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def _watchdogs_of(owner: int) -> list[int]:
    """The pids of the child watchdogs watching `owner` (processes of other tests may end while /proc is read)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(b"child_watchdog.py" in a for a in argv) and len(argv) >= 2 and argv[-2] == str(owner).encode():
            found.append(int(pid))
    return found


def _marked_commands(owner: int) -> list[str]:
    return sorted(
        Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0")[0].decode() for p in child_watchdog.marked(owner)
    )


@pytest.mark.parametrize("how", ["SIGKILL", "SIGTERM", "exit"])
def test_nothing_outlives_the_owner(how):
    owner, child = _owner(how)
    try:
        assert _eventually(lambda: _marked_commands(owner.pid) == ["bash", "sleep", "sleep"]), _marked_commands(
            owner.pid
        )
        assert glob.glob(child_watchdog.shm_glob(owner.pid))
        if how == "exit":
            owner.stdin.write("\n")
            owner.stdin.flush()
        else:
            owner.send_signal(getattr(signal, how))
        owner.wait(timeout=30)
        assert _eventually(lambda: not child_watchdog.marked(owner.pid)), _marked_commands(owner.pid)
        assert _eventually(lambda: not glob.glob(child_watchdog.shm_glob(owner.pid)), 5)
    finally:
        if owner.poll() is None:
            owner.kill()
        child_watchdog.kill_marked(owner.pid)
        child_watchdog.remove_shm(child_watchdog.shm_glob(owner.pid))


def test_the_death_signal_reaches_the_direct_child_without_the_watchdog():
    """PR_SET_PDEATHSIG alone: with the watchdog stopped first, SIGKILL of the owner still ends its child (not
    the grandchild: that is the watchdog's job)."""
    owner, child = _owner("wait")
    try:
        assert _eventually(lambda: len(child_watchdog.marked(owner.pid)) == 3)
        assert _eventually(lambda: len(_watchdogs_of(owner.pid)) == 1), _watchdogs_of(owner.pid)
        watchdogs = _watchdogs_of(owner.pid)
        os.kill(watchdogs[0], signal.SIGKILL)
        owner.kill()
        owner.wait(timeout=30)
        assert _eventually(lambda: child not in child_watchdog.marked(owner.pid))
        assert _marked_commands(owner.pid) == ["sleep", "sleep"]  # bash's own children: orphaned without a watchdog
    finally:
        if owner.poll() is None:
            owner.kill()
        child_watchdog.kill_marked(owner.pid)
        child_watchdog.remove_shm(child_watchdog.shm_glob(owner.pid))


def test_stop_leftovers_ends_only_its_own_child():
    from specbuild.processes import children

    a, b = children.new_tag(), children.new_tag()
    pa = children.spawn(["bash", "-c", "sleep 300 & wait"], tag=a)
    pb = children.spawn(["sleep", "300"], tag=b)
    try:
        assert _eventually(lambda: len(child_watchdog.marked(os.getpid(), a)) == 2)
        assert children.stop_leftovers(a) == 2
        assert child_watchdog.marked(os.getpid(), a) == [] and pb.poll() is None
        pa.wait(timeout=10)
    finally:
        for p in (pa, pb):
            p.kill()
            p.wait()
