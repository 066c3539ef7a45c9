"""Every error of a recipe file is reported, each in the same form (issue #39 item 9): `error: file:line:col: field:
message — fix`, one a line, however many there are; and an unknown method name no longer hides the file's other
problems: with the closest known method standing in, the schema of its section and every rule judge the rest (a
speculation field's problem says which method it was read as)."""

from __future__ import annotations

from pathlib import Path

import pytest

from specbuild.cli import main
from specbuild.errors import RecipeError
from specbuild.methods import METHODS
from specbuild.recipe import load_recipe

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "checkpoints" / "tiny"
MEDUSA = f"""name: two-mistakes
runtime: reference
model:
  checkpoint: {TINY / "target"}
  dtype: float32
speculation:
  method: medusa
  checkpoint: {TINY / "medusa"}
  num_heads: 4
  max_draft_len: 16
  choices: [[0], [1], [0, 0]]
validation:
  max_tokens: 32
"""


@pytest.fixture(autouse=True)
def _zoo():
    if not (TINY / "medusa").is_dir():
        pytest.skip("checkpoints/tiny not built")


def _write(tmp_path, **edits) -> Path:
    text = MEDUSA
    for old, new in edits.values():
        assert old in text, old
        text = text.replace(old, new)
    path = tmp_path / "r.yaml"
    path.write_text(text)
    return path


def _check_err(path, capsys) -> list[str]:
    assert main(["check", str(path)]) == 2
    return capsys.readouterr().err.splitlines()


def test_two_mistakes_are_two_errors_in_the_same_form(tmp_path, capsys):
    path = _write(tmp_path, dtype=("dtype: float32", "dtyp: float32"), tokens=("max_tokens: 32", "max_tokens: -1"))
    lines = _check_err(path, capsys)
    assert lines == [
        f"error: {path}:5:3: model.dtyp: unknown key 'dtyp' — did you mean 'dtype'?",
        f"error: {path}:13:15: validation.max_tokens: Input should be greater than 0 (got -1) — fix the value "
        "(see `specbuild schema`)",
    ]


def test_an_unknown_method_does_not_hide_the_other_errors(tmp_path, capsys):
    """The rest of the file loads with the closest method (medusa) in its place: a rule on the head's file (4 heads
    on disk, 5 asked) and the recipe's own rules still report, beside the unknown name."""
    path = _write(tmp_path, method=("method: medusa", "method: medusaa"), heads=("num_heads: 4", "num_heads: 5"))
    lines = _check_err(path, capsys)
    assert lines[0].startswith(f"error: {path}:7:11: speculation.method: unknown method 'medusaa' — did you mean ")
    assert len(lines) == 2 and lines[1].startswith(f"error: {path}:9:14: speculation.num_heads: is 5 but "), lines
    assert lines[1].endswith("(read as method 'medusa', the closest known name)")
    # the same through the loader (every problem listed), and with a schema mistake inside the section
    path = _write(tmp_path, method=("method: medusa", "method: medusaa"), heads=("num_heads: 4", "num_heads: four"))
    with pytest.raises(RecipeError) as info:
        load_recipe(path)
    assert [p.field for p in info.value.problems] == ["speculation.method", "speculation.num_heads"]
    assert "valid integer" in info.value.problems[1].message


def test_an_unknown_method_beside_a_missing_checkpoint(tmp_path, capsys):
    target = str(TINY / "target")
    path = _write(tmp_path, method=("method: medusa", "method: medusae"), target=(target, target + "-gone"))
    lines = _check_err(path, capsys)
    assert [ln.split(": ")[2] for ln in lines] == ["model.checkpoint", "speculation.method"], lines
    assert all(ln.startswith(f"error: {path}:") for ln in lines)


def test_a_close_name_whose_section_does_not_fit_stands_in_for_nothing(tmp_path, capsys):
    """'eagel' is closest to eagle, but the section holds Medusa's keys: no method stands in (it would only report
    Medusa's keys as unknown), and the unknown name is reported alone with the schema's other errors."""
    path = _write(tmp_path, method=("method: medusa", "method: eagel"))
    lines = _check_err(path, capsys)
    assert len(lines) == 1 and "unknown method 'eagel' — did you mean 'eagle'?" in lines[0], lines


def test_an_unknown_method_without_a_close_name_still_lists_the_schemas_other_errors(tmp_path, capsys):
    path = _write(tmp_path, method=("method: medusa", "method: zzz"), tokens=("max_tokens: 32", "max_tokens: -1"))
    lines = _check_err(path, capsys)
    assert lines == [
        f"error: {path}:7:11: speculation.method: unknown method 'zzz' — use one of {', '.join(sorted(METHODS))}",
        f"error: {path}:13:15: validation.max_tokens: Input should be greater than 0 (got -1) — fix the value "
        "(see `specbuild schema`)",
    ]
