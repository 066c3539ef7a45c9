"""Where a tritonserver's log goes when nobody names a file: beside the repository it serves, in a folder of its own
(`triton_repo/demo` logs into `triton_repo/demo.logs/`), or in the folder given (`serve --log-dir`), one file per
start named `tritonserver-<UTC time>-<pid>.log` (pid: the specbuild process that started it).

Not inside the repository: tritonserver takes every folder there for a model, and compile reuses a repository only
while its files are the ones it wrote. Not in /tmp: a log nobody named and nobody finds is left behind (51 on one
machine). A folder keeps the newest KEEP logs; older ones go when a server starts there, never the log of a
specbuild process still running. Standard library only.
"""

from __future__ import annotations

import datetime as _dt
import os
import re
from pathlib import Path

SUFFIX = ".logs"  # triton_repo/demo -> triton_repo/demo.logs/
KEEP = 10
NAME = re.compile(r"^tritonserver-(?P<time>\d{8}T\d{6}Z)-(?P<pid>\d+)(?:-\d+)?\.log$")


def default_folder(repository: Path) -> Path:
    """The log folder of a repository: a sibling named after it."""
    repository = Path(repository)
    return repository.parent / f"{repository.name}{SUFFIX}"


def new_log_file(folder: Path, now: _dt.datetime | None = None, pid: int | None = None) -> Path:
    """A fresh log file's path in `folder` (not created): the start time (UTC) and our pid name it; a number is
    added if two servers of this process start within the same second."""
    now = now or _dt.datetime.now(_dt.timezone.utc)
    stem = f"tritonserver-{now.strftime('%Y%m%dT%H%M%SZ')}-{pid or os.getpid()}"
    path, n = Path(folder) / f"{stem}.log", 1
    while path.exists():
        path, n = Path(folder) / f"{stem}-{n}.log", n + 1
    return path


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def prune(folder: Path, keep: int = KEEP, alive=_alive) -> list[Path]:
    """Remove the oldest of our logs in `folder` beyond the newest `keep` (by the time in their names), except
    those of a specbuild process still running. Returns what was removed; a file that cannot be removed stays."""
    ours = sorted(
        ((m.group("time"), p) for p in Path(folder).glob("tritonserver-*.log") if (m := NAME.match(p.name))),
        reverse=True,
    )
    removed = []
    for _, path in ours[keep:]:
        m = NAME.match(path.name)
        if m is None or alive(int(m.group("pid"))):
            continue
        try:
            path.unlink()
        except OSError:
            continue
        removed.append(path)
    return removed
