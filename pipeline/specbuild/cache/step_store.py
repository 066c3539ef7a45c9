"""The build cache: step outputs (engine folders, repositories) stored by their key (specbuild.cache.step_cache), so that
`compile` restores an output whose folder in place was deleted or was made from other inputs (a recipe changed
and changed back, a branch switched).

    <cache>/<key>/entry.json    {"cache": 1, "key", "step", "recipe", "role", "content", "size", "created"}
    <cache>/<key>/output/       the output's files (its provenance.json and Python bytecode left out)

<cache> is `--cache-dir`, else $SPECBUILD_CACHE_DIR/steps, else $XDG_CACHE_HOME/specbuild/steps, else
~/.cache/specbuild/steps. Files are hard-linked where the filesystem allows (outputs are replaced whole, never
edited in place, so a link costs no space and changes nothing), else copied. An entry is written into a partial
folder renamed into place (specbuild.files.atomic), and used only when the SHA-256 of its files still equals the one
recorded when it was stored: a half-written, edited or damaged entry is removed, never restored. An entry's age is
the time since it was stored or last restored (its entry.json's mtime): `specbuild cache prune --older-than`
removes the ones unused for that long.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from specbuild.files.atomic import atomic_folder, dead_leftover
from specbuild.errors import UserError
from specbuild.files.paths import show
from specbuild.serve.binary import cache_dir
from specbuild.cache.step_cache import content_digest, not_content

FORMAT = 1
ENTRY = "entry.json"
OUTPUT = "output"
ENV = "SPECBUILD_CACHE_DIR"


def default_root() -> Path:
    return cache_dir() / "steps"


@dataclass(frozen=True)
class Entry:
    key: str
    step: str
    recipe: str
    role: str | None
    content: str
    size: int
    created: float
    folder: Path

    @property
    def output(self) -> Path:
        return self.folder / OUTPUT

    @property
    def last_used(self) -> float:
        try:
            return (self.folder / ENTRY).stat().st_mtime
        except OSError:
            return self.created

    def to_dict(self) -> dict:
        return {
            "key": self.key,
            "step": self.step,
            "recipe": self.recipe,
            "role": self.role,
            "size": self.size,
            "created": self.created,
            "last_used": self.last_used,
            "folder": str(self.folder),
        }


def _link_or_copy(source: str, target: str) -> None:
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


# Outputs replaced whole by their writers, never edited in place: their files are hard-linked between the cache and
# the output folder. A report's are copied (compile writes the server logs into the report folder in place).
LINKED_STEPS = ("engine", "repository")


def _copy_tree(source: Path, target: Path, link: bool) -> None:
    """Copy the output `source` into the existing empty folder `target` (links kept as links; files hard-linked
    where `link` and the filesystem allow)."""

    def ignore(folder: str, names: list[str]) -> set[str]:
        rel = Path(folder).relative_to(source)
        return {n for n in names if not_content((rel / n).as_posix() if rel.parts else n)}

    copy = _link_or_copy if link else shutil.copy2
    shutil.copytree(source, target, symlinks=True, ignore=ignore, copy_function=copy, dirs_exist_ok=True)


def _size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink())


class Store:
    def __init__(self, root: Path | None = None):
        self.root = Path(root) if root is not None else default_root()

    def _read(self, folder: Path) -> Entry | None:
        try:
            data = json.loads((folder / ENTRY).read_text())
            return Entry(
                data["key"],
                data["step"],
                data["recipe"],
                data.get("role"),
                data["content"],
                int(data["size"]),
                float(data["created"]),
                folder,
            )
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def entries(self) -> list[Entry]:
        """Every entry whose entry.json reads (their content is checked when one is restored)."""
        if not self.root.is_dir():
            return []
        found = (self._read(p) for p in sorted(self.root.iterdir()) if p.is_dir() and not p.name.startswith("."))
        return [e for e in found if e is not None]

    def lookup(self, key: str) -> Entry | None:
        """The entry of `key` when it is whole as stored; a damaged one is removed."""
        folder = self.root / key
        if not folder.is_dir():
            return None
        entry = self._read(folder)
        if (
            entry is None
            or entry.key != key
            or not entry.output.is_dir()
            or content_digest(entry.output) != entry.content
        ):
            shutil.rmtree(folder, ignore_errors=True)
            return None
        return entry

    def put(self, key: str, output: Path, *, step: str, recipe: str, role: str | None = None) -> Entry:
        """Store the finished output folder `output` under `key` (an entry of that key already whole is kept)."""
        found = self.lookup(key)
        if found is not None:
            return found
        final = self.root / key
        with atomic_folder(final) as tmp:
            _copy_tree(Path(output), tmp / OUTPUT, link=step in LINKED_STEPS)
            data = {
                "cache": FORMAT,
                "key": key,
                "step": step,
                "recipe": recipe,
                "role": role,
                "content": content_digest(tmp / OUTPUT),
                "size": _size(tmp / OUTPUT),
                "created": time.time(),
            }
            (tmp / ENTRY).write_text(json.dumps(data, indent=2) + "\n")
        return self._read(final)

    def restore(self, entry: Entry, folder: Path) -> str:
        """Put the entry's output at `folder` (replacing what is there, atomically); its content digest."""
        with atomic_folder(Path(folder)) as tmp:
            _copy_tree(entry.output, tmp, link=entry.step in LINKED_STEPS)
            if content_digest(tmp) != entry.content:  # changed while it was copied
                raise UserError(
                    f"the build cache entry {show(entry.folder)} changed while it was restored — run compile again"
                )
        os.utime(entry.folder / ENTRY)  # last used now
        return entry.content

    def remove(self, entry: Entry) -> None:
        shutil.rmtree(entry.folder, ignore_errors=True)

    def leftovers(self) -> list[Path]:
        """Partial entries of processes that are gone (an interrupted put)."""
        if not self.root.is_dir():
            return []
        return [p for p in self.root.iterdir() if dead_leftover(p)]

    def prune(
        self,
        *,
        older_than_s: float | None = None,
        max_size: int | None = None,
        everything: bool = False,
        now: float | None = None,
    ) -> list[Entry]:
        """Remove entries (and leftovers of interrupted puts): all, those unused for `older_than_s`, then the least
        recently used until the rest is at most `max_size` bytes. Returns the entries removed."""
        now = time.time() if now is None else now
        for leftover in self.leftovers():
            shutil.rmtree(leftover, ignore_errors=True)
        entries = sorted(self.entries(), key=lambda e: e.last_used)
        removed = [e for e in entries if everything or (older_than_s is not None and now - e.last_used > older_than_s)]
        kept = [e for e in entries if e not in removed]
        if max_size is not None:
            total = sum(e.size for e in kept)
            while kept and total > max_size:
                oldest = kept.pop(0)
                total -= oldest.size
                removed.append(oldest)
        for entry in removed:
            self.remove(entry)
        return removed


# --- sizes and ages, for `specbuild cache` -------------------------------------------------------------------

_SIZE_UNITS = {"": 1, "B": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}
_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_size(text: str) -> int:
    """`500M`, `200G`, `1.5T`, `4096` (bytes; K/M/G/T are powers of 1024, an `iB`/`B` suffix is allowed)."""
    raw = text.strip().upper().removesuffix("IB").removesuffix("B")
    number, unit = (raw[:-1], raw[-1]) if raw and raw[-1] in _SIZE_UNITS else (raw, "")
    try:
        value = float(number)
    except ValueError:
        raise ValueError(f"{text!r} is not a size — write bytes or a number with K, M, G or T (200G)") from None
    if value < 0:
        raise ValueError(f"{text!r} is negative — give a size of 0 or more")
    return int(value * _SIZE_UNITS[unit])


def parse_duration(text: str) -> float:
    """`90s`, `30m`, `12h`, `14d`, `2w` (seconds)."""
    raw = text.strip().lower()
    try:
        value = float(raw[:-1]) if raw and raw[-1] in _DURATION_UNITS else None
    except ValueError:
        value = None
    if value is None or value < 0:
        raise ValueError(f"{text!r} is not an age — write a number with s, m, h, d or w (14d)")
    return value * _DURATION_UNITS[raw[-1]]


def human_size(size: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"


def human_duration(seconds: float) -> str:
    for unit, length in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= length:
            return f"{seconds / length:.0f}{unit}"
    return f"{max(seconds, 0):.0f}s"
