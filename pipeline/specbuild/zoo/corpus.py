"""The training corpus: this Python's own standard-library `.py` sources, in a fixed order and size.

Files come from `sysconfig.get_paths()["stdlib"]` (site-packages and test folders excluded), sorted by
relative path, taken whole until `max_bytes`. Each file is cut into documents at PEP 8's top-level
separators (two blank lines), so that documents are short and end-of-sequence is learnt.
A document goes to the held-out split when a hash of its file path and index says so (1 in 32).
"""

from __future__ import annotations

import hashlib
import sysconfig
from dataclasses import dataclass
from pathlib import Path

EXCLUDED_PARTS = {"site-packages", "dist-packages", "test", "tests", "idle_test", "__pycache__"}
HELDOUT_ONE_IN = 32
MIN_DOC_CHARS = 200
MAX_DOC_CHARS = 4000


@dataclass
class Corpus:
    train: list[str]
    heldout: list[str]
    files: int
    bytes: int
    sha256: str  # over (relative path, content) of every file used, in order
    root: str

    def summary(self) -> dict:
        return {
            "source": "python stdlib .py sources (sysconfig stdlib path)",
            "root": self.root,
            "files": self.files,
            "bytes": self.bytes,
            "sha256": self.sha256,
            "train_documents": len(self.train),
            "heldout_documents": len(self.heldout),
            "heldout_rule": f"sha256(path:index) % {HELDOUT_ONE_IN} == 0",
        }


def stdlib_files(root: Path) -> list[Path]:
    files = [p for p in root.rglob("*.py") if not EXCLUDED_PARTS.intersection(p.relative_to(root).parts)]
    return sorted(files, key=lambda p: p.relative_to(root).as_posix())


def split_documents(text: str) -> list[str]:
    """Cut a source file at top-level separators into documents of MIN..MAX_DOC_CHARS (roughly)."""
    docs, current = [], ""
    for piece in text.split("\n\n\n"):
        piece = piece.strip("\n")
        if not piece:
            continue
        current = f"{current}\n\n\n{piece}" if current else piece
        if len(current) >= MIN_DOC_CHARS:
            docs.extend(current[i : i + MAX_DOC_CHARS] for i in range(0, len(current), MAX_DOC_CHARS))
            current = ""
    if current:
        docs.append(current)
    return [d + "\n" for d in docs]


def _is_heldout(rel: str, index: int) -> bool:
    digest = hashlib.sha256(f"{rel}:{index}".encode()).digest()
    return int.from_bytes(digest[:4], "little") % HELDOUT_ONE_IN == 0


def load_corpus(max_bytes: int, root: str | Path | None = None) -> Corpus:
    root = Path(root or sysconfig.get_paths()["stdlib"])
    sha = hashlib.sha256()
    train, heldout, files, used = [], [], 0, 0
    for path in stdlib_files(root):
        data = path.read_bytes()
        if used + len(data) > max_bytes:
            if files:
                continue  # keep scanning for smaller files that still fit: deterministic, fills the cap
        rel = path.relative_to(root).as_posix()
        text = data.decode("utf-8", errors="replace")
        sha.update(rel.encode() + b"\0" + data + b"\0")
        files += 1
        used += len(data)
        for i, doc in enumerate(split_documents(text)):
            (heldout if _is_heldout(rel, i) else train).append(doc)
    return Corpus(train=train, heldout=heldout, files=files, bytes=used, sha256=sha.hexdigest(), root=str(root))
