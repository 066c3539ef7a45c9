"""Nothing half-written: an output folder is produced in a sibling `.<name>.partial-<pid>` and renamed into place.

On any failure or interrupt the partial folder is removed (design contract "Conventions"). Partial folders left by
a specbuild that was killed outright (SIGKILL) are removed by the next run once their process is gone.
"""

from __future__ import annotations

import os
import re
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

_PARTIAL = re.compile(r"^\.(?P<name>.+)\.(?:partial|old)-(?P<pid>\d+)$")


def partial_path(final: Path) -> Path:
    return final.with_name(f".{final.name}.partial-{os.getpid()}")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale(final: Path) -> list[Path]:
    """Remove leftovers of `final` from runs whose process no longer exists; returns what was removed."""
    removed = []
    if not final.parent.is_dir():
        return removed
    for p in final.parent.iterdir():
        m = _PARTIAL.match(p.name)
        if m and m.group("name") == final.name and (int(m.group("pid")) == os.getpid() or not _alive(int(m.group("pid")))):
            shutil.rmtree(p, ignore_errors=True)
            removed.append(p)
    return removed


def _replace(src: Path, final: Path) -> None:
    if final.exists():
        old = final.with_name(f".{final.name}.old-{os.getpid()}")
        shutil.rmtree(old, ignore_errors=True)
        final.rename(old)
        src.rename(final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        src.rename(final)


@contextmanager
def building(final: Path) -> Iterator[Path]:
    """Yield an empty partial folder next to `final`; on success it becomes `final`, on any exception it is removed."""
    final.parent.mkdir(parents=True, exist_ok=True)
    remove_stale(final)
    tmp = partial_path(final)
    tmp.mkdir()
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _replace(tmp, final)
