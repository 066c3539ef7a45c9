"""manifest.json: what a zoo folder holds (sha256 and size of every file) and how it was made."""

from __future__ import annotations

import hashlib
import json
import platform
from pathlib import Path

from specbuild.zoo.readme import render_readme

MANIFEST = "manifest.json"
UNTRACKED = {MANIFEST}


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def file_table(root: Path) -> dict[str, dict]:
    files = sorted(p for p in Path(root).rglob("*") if p.is_file() and p.name not in UNTRACKED)
    return {p.relative_to(root).as_posix(): {"bytes": p.stat().st_size, "sha256": sha256_file(p)} for p in files}


def versions() -> dict:
    import safetensors
    import tokenizers
    import torch
    import transformers

    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "tokenizers": tokenizers.__version__,
        "safetensors": safetensors.__version__,
    }


def write(root: Path, summary: dict) -> dict:
    """Write README.md, then manifest.json with every other file's size and sha256."""
    root = Path(root)
    (root / "README.md").write_text(render_readme(summary))
    table = file_table(root)
    full = {**summary, "files": table, "total_bytes": sum(f["bytes"] for f in table.values())}
    (root / MANIFEST).write_text(json.dumps(full, indent=2, sort_keys=False) + "\n")
    return full


def read(root: Path) -> dict | None:
    path = Path(root) / MANIFEST
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError:
        return None


def mismatches(root: Path, recorded: dict) -> list[str]:
    """Files whose size or sha256 differ from the manifest, or that are missing or extra."""
    actual = file_table(root)
    expected = recorded.get("files", {})
    problems = [f"missing: {name}" for name in expected if name not in actual]
    problems += [f"not in manifest: {name}" for name in actual if name not in expected]
    problems += [
        f"changed: {name}" for name in expected if name in actual and actual[name]["sha256"] != expected[name]["sha256"]
    ]
    return problems
