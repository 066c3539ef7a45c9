"""One name, one thing: no two classes of the package share a name (a reader who meets `MedusaHeads` knows which one it
is: the pack's params; the heads' network is `MedusaHeadsModule`). Excepted, with the reason: the name Triton's
python backend looks up in every Python model, and the files copied byte for byte into every repository, which are
self-contained (each defines what it needs; their hashes are golden)."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "pipeline" / "specbuild"
TRITON_ENTRY_POINT = "TritonPythonModel"  # triton_python_backend_utils loads the class of this name from model.py
COPIED = ("repository/engine/models/", "standalone/")  # copied into every repository byte for byte
# Twins that arrived in files other work is changing now, left to it to rename (the list only shrinks: a name here
# that is no longer defined twice fails too)
LEFT: dict[str, str] = {}


def class_names(files) -> dict[str, list[str]]:
    """class name -> `file:line` of each definition."""
    found: dict[str, list[str]] = defaultdict(list)
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.ClassDef):
                found[node.name].append(f"{path.relative_to(path.parents[1]).as_posix()}:{node.lineno}")
    return found


def test_no_class_name_is_defined_twice():
    files = [p for p in sorted(PACKAGE.rglob("*.py")) if not p.relative_to(PACKAGE).as_posix().startswith(COPIED)]
    twice = {name: where for name, where in class_names(files).items() if len(where) > 1 and name != TRITON_ENTRY_POINT}
    new = {n: w for n, w in twice.items() if n not in LEFT}
    assert not new, "classes of one name (give each its own):\n" + "\n".join(f"{n}: {w}" for n, w in new.items())
    assert not set(LEFT) - set(twice), f"no longer defined twice (remove from LEFT): {sorted(set(LEFT) - set(twice))}"


def test_the_finder_finds_twins(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "one.py").write_text("class Layout:\n    pass\n")
    (tmp_path / "a" / "two.py").write_text("def f():\n    class Layout:\n        pass\n")
    assert len(class_names(sorted((tmp_path / "a").glob("*.py")))["Layout"]) == 2
