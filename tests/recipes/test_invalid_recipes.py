"""Each invalid recipe under invalid/ states its expected first problem in its first line:

    # expect: LINE:COL: FIELD: MESSAGE FRAGMENT

The test checks that loading it reports exactly that location and field with that message, and that the CLI's
`check` exits 2 with the message and no traceback.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from specbuild.cli import main
from specbuild.errors import RecipeError
from specbuild.recipe import load_recipe

HERE = Path(__file__).parent
CASES = sorted((HERE / "invalid").glob("*.yaml"))
EXPECT = re.compile(r"# expect: (\d+):(\d+): ([^:]*): (.+)")


def expectation(path: Path):
    m = EXPECT.match(path.read_text().splitlines()[0])
    assert m, f"{path.name}: first line must be '# expect: LINE:COL: FIELD: MESSAGE'"
    return int(m.group(1)), int(m.group(2)), m.group(3).strip(), m.group(4).strip()


def test_there_are_at_least_40_cases():
    assert len(CASES) >= 40


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_invalid_recipe_is_reported_at_its_place(path: Path):
    line, col, field, fragment = expectation(path)
    with pytest.raises(RecipeError) as info:
        load_recipe(path)
    problems = info.value.problems
    matching = [p for p in problems if fragment in p.message]
    assert matching, f"no problem mentions {fragment!r}; got:\n{info.value}"
    p = matching[0]
    assert (p.line, p.col, p.field) == (line, col, field), f"located wrong: {p}"
    assert str(p).startswith(f"{path}:{line}:{col}:")


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_cli_check_exits_2_without_traceback(path: Path, capsys):
    line, col, _, fragment = expectation(path)
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}:{line}:{col}:" in err and fragment in err
    assert "Traceback" not in err
