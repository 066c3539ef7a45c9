"""The runtime seam holds: runtime names are compared only inside runtime packages, the registries drive the
recipe's allowed values, and every method describes its speculation as the frozen description (that every
runtime implements its interface: tests/runtimes/test_interface_conformance.py)."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from specbuild import runtimes
from specbuild.methods import METHODS
from specbuild.recipe.schema import Recipe
from specbuild.speculation import Speculation

PACKAGE = Path(__file__).resolve().parents[2] / "pipeline" / "specbuild"
RUNTIME_PACKAGES = ("runtimes", "reference", "trtllm")


def _names_runtime(node: ast.AST) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "runtime") or (
        isinstance(node, ast.Name) and node.id == "runtime"
    )


def runtime_comparisons(path: Path) -> list[str]:
    """`x.runtime == "..."`, `!=`, `in`, `not in` comparisons against string constants in one file."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        operands = [node.left, *node.comparators]
        consts = [
            o
            for o in operands
            if isinstance(o, ast.Constant) and isinstance(o.value, str) or isinstance(o, (ast.Tuple, ast.List, ast.Set))
        ]
        if any(_names_runtime(o) for o in operands) and consts:
            found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_runtime_comparison_outside_the_runtime_packages():
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.relative_to(PACKAGE).parts[0] in RUNTIME_PACKAGES:
            continue
        offenders += runtime_comparisons(path)
    assert not offenders, "compare runtimes only inside their packages (ask runtime_for(recipe)):\n" + "\n".join(
        offenders
    )


def test_the_comparison_finder_finds_comparisons(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text(
        'if recipe.runtime == "reference" or recipe.runtime in ("a",) or runtime != "x":\n    pass\n'
        "if recipe.runtime is None:\n    pass\n"
    )
    assert len(runtime_comparisons(probe)) == 3


def test_recipe_values_come_from_the_registries():
    schema = Recipe.model_json_schema()
    assert schema["properties"]["runtime"]["enum"] == list(runtimes.NAMES)
    assert schema["properties"]["flavour"]["enum"] == list(runtimes.FLAVOURS)
    methods = {ref["$ref"].rsplit("/", 1)[-1] for ref in schema["properties"]["speculation"]["oneOf"]}
    assert methods == {m.Config.__name__ for m in METHODS.values()}


def test_the_description_is_frozen():
    spec = Speculation(method="none", mode=None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.max_draft_len = 3  # type: ignore[misc]
