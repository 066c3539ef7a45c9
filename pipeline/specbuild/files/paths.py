"""How paths are printed: relative to the working directory when inside it (plans stay machine-independent)."""

from __future__ import annotations

import os
from pathlib import Path


def show(path: Path | str) -> str:
    p = Path(path)
    try:
        rel = os.path.relpath(p, Path.cwd())
    except ValueError:
        return str(p)
    return str(p) if rel.startswith("..") else rel
