"""docs/design.md's "Layout" block describes the tree as it is: every top-level module and package of specbuild is
listed there and everything listed exists; a method pack's files are the kinds the block names; the repository
folders it names are there."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "pipeline" / "specbuild"
ENTRY = re.compile(r"^(?P<indent> *)(?P<name>\S+)")


def layout_block(text: str) -> list[str]:
    """The lines of the first fenced block after the "## Layout" heading."""
    after = text.split("\n## Layout\n", 1)[1]
    return after.split("```\n", 2)[1].splitlines()


def listed(lines: list[str]) -> tuple[set[str], set[str], set[str]]:
    """(the package's top-level entries, a pack's file kinds, the repository's folders) the block names: an entry is
    the first word of a line indented 2 (the package), 4 (`<name>/<file>` of a pack) or 0 (the repository)."""
    top, pack, repository = set(), set(), set()
    inside = False
    for line in lines:
        m = ENTRY.match(line)
        if not m:
            continue
        indent, name = len(m.group("indent")), m.group("name")
        if indent == 0:
            inside = name == "pipeline/specbuild/"
            if not inside:
                repository.add(name)
        elif inside and indent == 2 and (name.endswith("/") or name.endswith(".py")):
            top.add(name)
        elif inside and indent == 4 and name.startswith("<name>/"):
            pack.add(name.removeprefix("<name>/"))
    return top, pack, repository


def actual_top(package: Path) -> set[str]:
    out = {p.name for p in package.glob("*.py") if p.name != "__init__.py"}
    return out | {f"{p.name}/" for p in package.iterdir() if p.is_dir() and (p / "__init__.py").is_file()}


def pack_files(package: Path) -> set[str]:
    return {
        f.name
        for d in (package / "methods").iterdir()
        if d.is_dir() and (d / "__init__.py").is_file()
        for f in d.glob("*.py")
    }


def test_the_layout_block_lists_the_package_as_it_is():
    top, pack, repository = listed(layout_block((ROOT / "docs" / "design.md").read_text()))
    have = actual_top(PACKAGE)
    assert sorted(have - top) == [], "in the package, missing from docs/design.md's layout"
    assert sorted(top - have) == [], "in docs/design.md's layout, not in the package"
    files = pack_files(PACKAGE)
    assert sorted(files - pack) == [], "a pack's file that docs/design.md's layout does not name"
    assert sorted(pack - files) == [], "a pack file docs/design.md's layout names that no pack has"
    assert sorted(r for r in repository if not (ROOT / r).exists()) == []


def test_the_reader_sees_a_missing_entry(tmp_path):
    lines = ["pipeline/specbuild/", "  cli.py                 the command line", "  methods/               packs",
             "    <name>/params.py     its params", "tests/                   pytest"]  # fmt: skip
    assert listed(lines) == ({"cli.py", "methods/"}, {"params.py"}, {"tests/"})
    (tmp_path / "cli.py").write_text("")
    (tmp_path / "plan.py").write_text("")
    (tmp_path / "methods" / "x").mkdir(parents=True)
    (tmp_path / "methods" / "__init__.py").write_text("")
    (tmp_path / "methods" / "x" / "__init__.py").write_text("")
    assert actual_top(tmp_path) - listed(lines)[0] == {"plan.py"}
    assert pack_files(tmp_path) == {"__init__.py"}
