"""Nothing half-written: every output folder is produced in a sibling `.<name>.partial-<pid>` and swapped into place.

    with atomic_folder(final, notice=print) as tmp:   # stale leftovers of dead runs are removed first
        ...write into tmp...                          # on any exception (or interrupt) tmp is removed
    # here `final` is the new folder; an older one was replaced in one step

The swap uses renameat2(RENAME_EXCHANGE) where the kernel has it, so there is never a moment with neither the old
nor the new folder; elsewhere the old folder is renamed aside first and put back if the second rename fails.
Leftovers (`.partial-<pid>` / `.old-<pid>`) of processes that no longer exist are removed by the next writer of
the same folder, which says so in one line.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import re
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, Mapping

from specbuild.errors import UserError
from specbuild.files.paths import show

_LEFTOVER = re.compile(r"^\.(?P<name>.+)\.(?:partial|old)-(?P<pid>\d+)$")
_AT_FDCWD = -100
_RENAME_EXCHANGE = 2

Notice = Callable[[str], None]


def partial_path(final: Path) -> Path:
    return final.with_name(f".{final.name}.partial-{os.getpid()}")


def _old_path(final: Path) -> Path:
    return final.with_name(f".{final.name}.old-{os.getpid()}")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale(final: Path, notice: Notice | None = None) -> list[Path]:
    """Remove leftovers of `final` written by this process earlier or by processes that are gone."""
    removed = []
    try:
        siblings = list(final.parent.iterdir()) if final.parent.is_dir() else []
    except OSError:
        return removed
    for p in siblings:
        m = _LEFTOVER.match(p.name)
        if m and m.group("name") == final.name:
            pid = int(m.group("pid"))
            if pid == os.getpid() or not _alive(pid):
                _remove(p)
                removed.append(p)
    others = [p for p in removed if not p.name.endswith(f"-{os.getpid()}")]
    if others and notice is not None:
        notice(
            f"removed {len(others)} leftover folder(s) of interrupted runs beside {show(final)}: "
            + ", ".join(p.name for p in others)
        )
    return removed


def dead_leftover(path: Path) -> bool:
    """`path` is a partial or old folder (`.<name>.partial-<pid>`) of a process that no longer exists."""
    m = _LEFTOVER.match(path.name)
    return bool(m) and not _alive(int(m.group("pid")))


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        try:
            path.unlink()
        except OSError:
            pass


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically (Linux renameat2 RENAME_EXCHANGE). False where that is not available."""
    libc_name = ctypes.util.find_library("c")
    if not libc_name:
        return False
    try:
        libc = ctypes.CDLL(libc_name, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def replace_folder(new: Path, final: Path) -> None:
    """Put the finished folder `new` at `final`, replacing what is there in one step where possible."""
    if final.is_symlink() or final.is_file():
        raise UserError(f"{show(final)} exists and is not a folder — move it away or choose another output folder")
    if not final.exists():
        os.rename(new, final)
        return
    if _exchange(new, final):
        shutil.rmtree(new, ignore_errors=True)  # `new` now holds the previous folder
        return
    old = _old_path(final)
    shutil.rmtree(old, ignore_errors=True)
    os.rename(final, old)
    try:
        os.rename(new, final)
    except BaseException:
        os.rename(old, final)
        raise
    shutil.rmtree(old, ignore_errors=True)


def _carry_over(final: Path, tmp: Path, patterns: tuple[str, ...]) -> None:
    """Move files matching `patterns` from the current `final` into the new folder (a log still being written
    keeps its open file: rename moves it without interrupting the writer)."""
    if not patterns or not final.is_dir():
        return
    for pattern in patterns:
        for path in final.glob(pattern):
            if path.is_file() and not (tmp / path.name).exists():
                os.rename(path, tmp / path.name)


@contextmanager
def atomic_folder(final: Path, notice: Notice | None = None, *, carry: tuple[str, ...] = ()) -> Iterator[Path]:
    """Yield an empty partial folder next to `final`; on success it becomes `final`, on any exception it is
    removed and `final` is left as it was. `carry`: glob patterns of files of the current `final` that the new
    folder takes over (e.g. server logs beside a report). OS errors (permissions, a file in the way) become
    UserErrors."""
    final = Path(final)
    try:
        if final.is_symlink() or final.is_file():
            raise UserError(f"{show(final)} exists and is not a folder — move it away or choose another output folder")
        final.parent.mkdir(parents=True, exist_ok=True)
        remove_stale(final, notice)
        tmp = partial_path(final)
        tmp.mkdir()
    except OSError as e:
        raise UserError(
            f"cannot write {show(final)}: {e.strerror or e} — make {show(final.parent)} writable or "
            "choose another output folder"
        ) from None
    try:
        yield tmp
        _carry_over(final, tmp, carry)
        replace_folder(tmp, final)
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise UserError(
            f"cannot write {show(final)}: {e.strerror or e}"
            f"{f' ({e.filename})' if e.filename else ''} — check the free space and permissions of "
            f"{show(final.parent)}"
        ) from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def write_tree(
    final: Path, files: Mapping[str, str | bytes], *, executable: tuple[str, ...] = (), notice: Notice | None = None
) -> Path:
    """Write `files` (relative path -> text or bytes) as the folder `final`, atomically."""
    with atomic_folder(final, notice) as tmp:
        for rel, content in files.items():
            path = tmp / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(content, bytes):
                path.write_bytes(content)
            else:
                path.write_text(content)
            if rel in executable:
                path.chmod(0o755)
    return final


def write_file(final: Path, content: str | bytes) -> Path:
    """Write one file atomically: a sibling `.<name>.partial-<pid>` renamed over `final` (never half-written)."""
    final = Path(final)
    tmp = final.with_name(f".{final.name}.partial-{os.getpid()}")
    try:
        if isinstance(content, bytes):
            tmp.write_bytes(content)
        else:
            tmp.write_text(content)
        os.replace(tmp, final)
    except BaseException:
        _remove(tmp)
        raise
    return final
