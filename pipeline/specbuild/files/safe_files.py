"""Reading small input files safely: a size cap, regular files only, nothing read past the cap, no hang.

    text = read_text(path, what="prompt file", max_bytes=8 << 20)
    config = read_json(ckpt / "config.json", what="checkpoint config", max_bytes=1 << 20, root=ckpt)

Every failure raises `UnreadableFile` (a UserError: exit 2) naming the file and saying what to do: missing, a
folder, a FIFO / device / socket (opened without blocking and refused: /dev/zero is never read), permission
denied, over the cap, not UTF-8, not JSON, JSON of the wrong top-level shape or nested too deeply, and — with
`root` — a path whose real location (symlinks followed) is outside `root`.
Standard library only.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path
from typing import Any

from specbuild.errors import UserError

MiB = 1 << 20


class UnreadableFile(UserError):
    """A file that cannot be used as input; `reason` says why and what to do (without the path)."""

    def __init__(self, path: Path | str, reason: str):
        self.path = Path(path)
        self.reason = reason
        super().__init__(f"{path}: {reason}")


def _size(n: int) -> str:
    return f"{n / MiB:.1f} MiB" if n >= MiB else f"{n / 1024:.0f} KiB" if n >= 1024 else f"{n} bytes"


def _kind(mode: int) -> str | None:
    """What a non-regular file is, in words (None for a regular file)."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def _os_error(path: Path, e: OSError, what: str) -> UnreadableFile:
    if isinstance(e, FileNotFoundError):
        return UnreadableFile(path, f"no such file — check the path of the {what}")
    if isinstance(e, PermissionError):
        return UnreadableFile(path, f"permission denied — make the {what} readable (chmod u+r) or run as its owner")
    if isinstance(e, IsADirectoryError):
        return UnreadableFile(path, f"is a folder — give the {what} itself")
    if e.errno == errno.ENXIO:
        return UnreadableFile(path, f"is a socket — give the {what} as a regular file")
    if e.errno == errno.ENAMETOOLONG:
        return UnreadableFile(path, f"the path is too long for this system — move the {what} to a shorter path")
    if e.errno == errno.ELOOP:
        return UnreadableFile(path, "is a loop of symbolic links — point the link at a real file")
    if e.errno == errno.ENOTDIR:
        return UnreadableFile(path, f"a part of the path is a file, not a folder — check the path of the {what}")
    return UnreadableFile(path, f"cannot be read ({e.strerror or e}) — check the {what}")


def check_inside(path: Path, root: Path, what: str) -> Path:
    """The real path of `path` (symlinks followed); UnreadableFile when it lies outside `root`'s real path."""
    try:
        real, real_root = Path(path).resolve(), Path(root).resolve()
    except (OSError, RuntimeError) as e:  # RuntimeError: a symlink loop (Python < 3.13)
        raise _os_error(Path(path), e if isinstance(e, OSError) else OSError(errno.ELOOP, "loop"), what) from None
    if real != real_root and real_root not in real.parents:
        raise UnreadableFile(
            path,
            f"leads out of {root} (to {real}) — copy the {what} into {root} instead of linking to a place outside it",
        )
    return real


def _open_regular(path: Path, what: str, root: Path | None) -> tuple[int, os.stat_result]:
    """An open descriptor of a regular file and its stat, or UnreadableFile (the caller closes it)."""
    if root is not None:
        check_inside(path, root, what)
    try:
        # O_NONBLOCK: opening a FIFO without a writer returns at once (then it is refused below)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise _os_error(path, e, what) from None
    try:
        st = os.fstat(fd)
        kind = _kind(st.st_mode)
        if kind is not None:
            hint = f"give the {what} itself" if kind == "a folder" else f"give the {what} as a regular file"
            raise UnreadableFile(path, f"is {kind}, not a regular file — {hint}")
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def _read_upto(fd: int, path: Path, limit: int, what: str) -> bytes:
    """Up to `limit` + 1 bytes from `fd` (one more than the limit tells a file that grew)."""
    chunks, total = [], 0
    while total <= limit:
        try:
            chunk = os.read(fd, min(1 << 16, limit + 1 - total))
        except BlockingIOError:  # pragma: no cover - regular files do not block
            continue
        except OSError as e:
            raise _os_error(path, e, what) from None
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
    return b"".join(chunks)


def read_bytes(path: Path | str, *, what: str, max_bytes: int, root: Path | None = None) -> bytes:
    """At most `max_bytes` of a regular file, or UnreadableFile."""
    path = Path(path)
    fd, st = _open_regular(path, what, root)
    try:
        if st.st_size > max_bytes:
            raise UnreadableFile(path, _too_big(st.st_size, max_bytes, what))
        data = _read_upto(fd, path, max_bytes, what)
        if len(data) > max_bytes:  # it grew while being read
            raise UnreadableFile(path, _too_big(len(data), max_bytes, what).replace("is ", "is more than ", 1))
        return data
    finally:
        os.close(fd)


def read_start(path: Path | str, n_bytes: int, *, what: str, root: Path | None = None) -> bytes:
    """The first `n_bytes` of a regular file of any size (fewer when it is shorter), or UnreadableFile: for
    headers of large files (a safetensors header)."""
    path = Path(path)
    fd, _ = _open_regular(path, what, root)
    try:
        return _read_upto(fd, path, n_bytes - 1, what) if n_bytes > 0 else b""
    finally:
        os.close(fd)


def _too_big(size: int, limit: int, what: str) -> str:
    return f"is {_size(size)}; a {what} may have at most {_size(limit)} — check that this is the right file"


def read_text(path: Path | str, *, what: str, max_bytes: int, root: Path | None = None) -> str:
    """A UTF-8 text file (a leading byte-order mark is dropped), or UnreadableFile."""
    data = read_bytes(path, what=what, max_bytes=max_bytes, root=root)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise UnreadableFile(
            path, f"is not UTF-8 text (byte {e.start + 1}, line {line}: {e.reason}) — save the {what} as UTF-8"
        ) from None


_SHAPES = {dict: "a JSON object ({...})", list: "a JSON array ([...])", str: "a JSON string"}


def _json_kind(value: Any) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number"
    )


def read_json(
    path: Path | str, *, what: str, max_bytes: int, root: Path | None = None, shape: type | None = dict
) -> Any:
    """A JSON file whose top level is `shape` (None: anything), or UnreadableFile."""
    text = read_text(path, what=what, max_bytes=max_bytes, root=root)
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise UnreadableFile(
            path, f"is not valid JSON (line {e.lineno}, column {e.colno}: {e.msg}) — fix the {what}"
        ) from None
    except RecursionError:
        raise UnreadableFile(path, f"is nested too deeply to be a {what} — check that this is the right file") from None
    except ValueError as e:  # e.g. an integer of thousands of digits
        raise UnreadableFile(path, f"is not usable JSON ({e}) — fix the {what}") from None
    if shape is not None and not isinstance(value, shape):
        raise UnreadableFile(
            path,
            f"must hold {_SHAPES.get(shape, shape.__name__)} at the top, not "
            f"{_json_kind(value)} — check that this is the {what}",
        )
    return value
