"""Tuning from the measured sweep (specbuild/validate/tuning.py, `specbuild validate --write-tuned-recipe`): the
schedule turns speculation off where the sweep saw it stop paying (interpolated crossover), keeps the recipe's own
lengths below, ignores levels where the recipe already had speculation off, refuses what no schedule can fix, and the
recipe file is written again with its comments kept and its relative paths still naming the same files."""

from __future__ import annotations

from pathlib import Path

import pytest

from specbuild.errors import UserError
from specbuild.methods import describe
from specbuild.recipe import load_recipe
from specbuild.validate.checks.base import PASSED, CheckResult
from specbuild.validate.tuning import measured_speedups, tuned_schedule, write_tuned_recipe

CKPT = Path(__file__).resolve().parent.parent / "recipes" / "ckpt"
RECIPE = """\
# a demo-like recipe: the comments must survive tuning
name: tuned
runtime: reference
model:
  checkpoint: ckpt/target   # relative to this file
speculation:
  method: medusa
  checkpoint: ckpt/medusa
  num_heads: 4
  choices: [[0], [0, 0], [1], [0, 1]]
build:
  max_batch_size: 8
validation:
  concurrency: [1, 2, 4, 8]
{adaptive}"""


def recipe_file(folder: Path, adaptive: str = "") -> Path:
    (folder / "ckpt").symlink_to(CKPT, target_is_directory=True)
    path = folder / "recipe.yaml"
    path.write_text(RECIPE.format(adaptive=adaptive))
    return path


def performance(points, **extra) -> CheckResult:
    """A performance result as the check writes it (details["speedup"]; H9's rounds add min/max/rounds)."""
    return CheckResult(
        "performance",
        "Performance",
        PASSED,
        "",
        {
            "speedup": [
                {"concurrency": c, "speedup": v, "speculative_tokens_per_s": 1.0, "baseline_tokens_per_s": 1.0, **extra}
                for c, v in points
            ]
        },
    )


def test_the_speedups_come_from_the_checks_details():
    assert measured_speedups(performance([(4, 0.8), (1, 1.4), (2, 1.1)], speedup_min=0.7, rounds=[0.7, 0.9])) == [
        (1, 1.4),
        (2, 1.1),
        (4, 0.8),
    ]
    assert measured_speedups(performance([(1, None)])) == [] and measured_speedups(None) == []


def test_off_from_the_interpolated_crossover(tmp_path):
    spec = describe(load_recipe(recipe_file(tmp_path)))
    tuning = tuned_schedule(spec, [(1, 1.5), (2, 1.2), (4, 0.9), (8, 0.7)], 8)
    # log2 crossover between 2 (1.2) and 4 (0.9): 2 ** (1 + 0.2 / 0.3) = 3.17 -> off from 4 requests
    assert tuning.schedule == {1: 4, 4: 0}
    assert "stopped paying at concurrency 4" in tuning.why
    tuning = tuned_schedule(spec, [(1, 1.5), (2, 0.6), (4, 0.5)], 8)
    assert tuning.schedule == {1: 4, 2: 0}
    tuning = tuned_schedule(spec, [(1, 1.5), (4, 1.1), (8, 0.5)], 8)  # 2 ** (2 + 0.1 / 0.6) = 4.5: off from 5
    assert tuning.schedule == {1: 4, 5: 0}


def test_paying_everywhere_or_never_at_one(tmp_path):
    spec = describe(load_recipe(recipe_file(tmp_path)))
    assert tuned_schedule(spec, [(1, 1.5), (2, 1.2), (4, 1.01)], 8).schedule is None
    with pytest.raises(UserError, match="does not pay at concurrency 1"):
        tuned_schedule(spec, [(1, 0.9), (2, 0.8)], 8)
    with pytest.raises(UserError, match="measured no speedup"):
        tuned_schedule(spec, [], 8)


def test_the_recipes_schedule_is_kept_below_and_its_off_levels_ignored(tmp_path):
    spec = describe(load_recipe(recipe_file(tmp_path, "adaptive:\n  draft_len_schedule: {1: 4, 2: 2, 8: 0}\n")))
    # at 8 speculation was already off: its 0.97 is noise and says nothing; at 4 (length 2) it lost
    tuning = tuned_schedule(spec, [(1, 1.4), (2, 1.1), (4, 0.95), (8, 0.97)], 8)
    assert tuning.schedule == {1: 4, 2: 2, 4: 0}
    assert tuned_schedule(spec, [(1, 1.4), (2, 1.1), (4, 1.05), (8, 0.97)], 8).schedule is None


def test_the_tuned_recipe_keeps_comments_and_paths(tmp_path):
    recipe = load_recipe(recipe_file(tmp_path))
    elsewhere = tmp_path / "tuned"
    elsewhere.mkdir()
    out = write_tuned_recipe(recipe, elsewhere / "recipe.tuned.yaml", {1: 4, 4: 0})
    text = out.read_text()
    assert "# a demo-like recipe: the comments must survive tuning" in text and "# relative to this file" in text
    assert "draft_len_schedule: {1: 4, 4: 0}" in text
    tuned = load_recipe(out)  # checks included: the relative checkpoint paths still resolve
    assert tuned.model_dir == recipe.model_dir and tuned.adaptive.draft_len_schedule == {1: 4, 4: 0}
    assert describe(tuned).draft_len_schedule == ((1, 4), (4, 0))
    beside = write_tuned_recipe(recipe, tmp_path / "beside.yaml", {1: 4, 2: 0})
    assert "checkpoint: ckpt/target" in beside.read_text()  # same folder: paths untouched


def test_cli_writes_the_tuned_recipe(tmp_path, monkeypatch, capsys):
    import specbuild.validate as validate
    from specbuild.cli import main
    from specbuild.validate.result import ValidationResult

    path = recipe_file(tmp_path)

    def fake_run(build, target, baseline, **kwargs):
        assert baseline is not None
        return ValidationResult(
            recipe=build.recipe.name,
            method="medusa",
            runtime="reference",
            target=target,
            baseline=baseline,
            serving_model="ensemble",
            started="",
            duration_s=0.0,
            prompts=1,
            checks=[performance([(1, 1.3), (2, 1.05), (4, 0.8), (8, 0.6)])],
        )

    monkeypatch.setattr(validate, "run_validation", fake_run)
    out = tmp_path / "tuned.yaml"
    code = main(
        [
            "validate",
            str(path),
            "--url",
            "127.0.0.1:9",
            "--baseline-url",
            "127.0.0.1:10",
            "--write-tuned-recipe",
            str(out),
        ]
    )
    assert code == 0, capsys.readouterr().err
    assert load_recipe(out).adaptive.draft_len_schedule == {1: 4, 3: 0}
    assert main(["validate", str(path), "--url", "127.0.0.1:9", "--write-tuned-recipe", str(out)]) == 2
    assert "give --baseline-url" in capsys.readouterr().err
