"""Child processes that never outlive specbuild: tritonserver, trtllm-build, checkpoint converters.

    proc = spawn(argv, tag=new_tag(), stdout=log)      # own session, marked, dies with specbuild
    ...
    stop_leftovers(tag)                                # after it ended: kill what it left, remove its /dev/shm

Three layers, because no single one covers everything:
- each child runs in its own session (a terminal's Ctrl-C reaches only specbuild, which stops it in order);
- the kernel sends SIGKILL to the child when the thread that started it dies (prctl PR_SET_PDEATHSIG, set
  between fork and exec; see prctl(2)), whatever killed specbuild;
- a watchdog process (`specbuild.processes.child_watchdog`) kills what the child started (python backend stubs, MPI ranks,
  build workers: they are not the owner's children) and removes the python backend's /dev/shm regions: every
  child's environment carries SPECBUILD_OWNER=<specbuild pid> and SPECBUILD_CHILD=<tag>, which its own children
  inherit, and every server's shm-region-prefix-name is `shm_prefix(tag)`.
Standard library only.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import threading
import uuid
from pathlib import Path
from typing import Callable

from specbuild.processes import child_watchdog
from specbuild.processes.child_watchdog import CHILD_VAR, OWNER_VAR

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
_SIGKILL = 9

_lock = threading.Lock()
_watchdog: tuple[int, subprocess.Popen] | None = None  # (owner pid, process): a fork gets its own


def new_tag() -> str:
    return uuid.uuid4().hex[:10]


def shm_prefix(tag: str) -> str:
    """The shm-region-prefix-name to give the python backend of the server tagged `tag`."""
    return child_watchdog.shm_prefix(os.getpid(), tag)


def marked_environment(env: dict[str, str] | None, tag: str) -> dict[str, str]:
    out = dict(os.environ if env is None else env)
    out[OWNER_VAR] = str(os.getpid())
    out[CHILD_VAR] = tag
    return out


def _die_with_parent() -> Callable[[], None] | None:
    """A preexec_fn asking the kernel for SIGKILL when the starting thread ends (Linux); None elsewhere.

    The death signal follows the *thread* that forked (prctl(2)): it is set only for children started by the
    main thread, which lives as long as specbuild; children of other threads rely on the watchdog alone."""
    if not sys.platform.startswith("linux") or threading.current_thread() is not threading.main_thread():
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up before the fork: nothing to load in the child
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def preexec() -> None:
        prctl(PR_SET_PDEATHSIG, _SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the request took effect
            os._exit(1)

    return preexec


def ensure_watchdog() -> None:
    """Start this process's watchdog once (before its first child, so that no child is ever unwatched)."""
    global _watchdog
    with _lock:
        if _watchdog is not None and _watchdog[0] == os.getpid() and _watchdog[1].poll() is None:
            return
        env = {k: v for k, v in os.environ.items() if k not in (OWNER_VAR, CHILD_VAR)}  # never kills itself
        proc = subprocess.Popen(
            [sys.executable, "-I", "-S", str(Path(child_watchdog.__file__)), str(os.getpid())],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
            close_fds=True,
        )
        _watchdog = (os.getpid(), proc)


def spawn(argv: list[str], *, tag: str, env: dict[str, str] | None = None, **popen_kwargs) -> subprocess.Popen:
    """subprocess.Popen(argv) in a new session, marked with this process and `tag`, tied to this process's life."""
    ensure_watchdog()
    return subprocess.Popen(
        argv, env=marked_environment(env, tag), start_new_session=True, preexec_fn=_die_with_parent(), **popen_kwargs
    )


def stop_leftovers(tag: str, wait_s: float = 10.0) -> int:
    """After a child ended: SIGKILL whatever it started that still runs, and remove its /dev/shm regions.
    Returns how many processes were left."""
    owner = os.getpid()
    left = child_watchdog.kill_marked(owner, tag, wait_s=wait_s)
    child_watchdog.remove_shm(child_watchdog.shm_glob(owner, tag))
    return left
