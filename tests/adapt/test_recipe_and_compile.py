"""The recipe's adapt section: its settings checked where they are written, `check` refusing traffic it cannot send,
DIR/recipe.yaml loading as the recipe it came from with the new head, and compile running adapt before the engines
(the head the gate chose is the one built)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from specbuild.adapt.recipe_out import adapted_recipe_text
from specbuild.cli import main
from specbuild.load import load_build

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "checkpoints" / "tiny"

RECIPE = """\
name: adapt-compile
runtime: reference
model:
  checkpoint: {tiny}/target
  dtype: float32
speculation:
  method: eagle
  checkpoint: {tiny}/eagle
  num_eagle_layers: 2
  max_draft_len: 2
  max_non_leaves_per_layer: 1
  choices: [[0], [0, 0]]
validation:
  max_tokens: 8
  require_lossless: false
adapt:
{adapt}
"""


def write(tmp_path: Path, adapt: str) -> Path:
    path = tmp_path / "recipe.yaml"
    path.write_text(RECIPE.format(tiny=TINY, adapt=adapt))
    return path


def test_shares_that_leave_nothing_to_train_on_are_refused_at_the_field(tmp_path, capsys):
    recipe = write(tmp_path, "  held_out: 0.7\n  dev: 0.3")
    assert main(["check", str(recipe)]) == 2
    err = capsys.readouterr().err
    assert "adapt" in err and "leave no traffic to train on" in err


def test_check_refuses_missing_traffic_and_chat_traffic_without_a_template(tmp_path, capsys):
    recipe = write(tmp_path, f"  traffic: {tmp_path / 'missing.jsonl'}")
    assert main(["check", str(recipe)]) == 2
    assert "adapt.traffic" in capsys.readouterr().err
    chats = tmp_path / "chats.jsonl"
    chats.write_text(json.dumps({"id": "c1", "messages": [{"role": "user", "content": "hi"}]}) + "\n")
    recipe = write(tmp_path, f"  traffic: {chats}")
    assert main(["check", str(recipe)]) == 2
    err = capsys.readouterr().err
    assert "c1" in err and "chat template" in err
    text = tmp_path / "text.jsonl"
    text.write_text(json.dumps({"prompt": "def f(x):"}) + "\n")
    assert main(["check", str(write(tmp_path, f"  traffic: {text}"))]) == 0


def test_the_adapted_recipe_is_the_same_recipe_with_the_new_head(tmp_path):
    build = load_build(write(tmp_path, "  max_steps: 5"))
    head = tmp_path / "out" / "head"
    shutil.copytree(TINY / "eagle", head)
    (tmp_path / "out" / "recipe.yaml").write_text(adapted_recipe_text(build.recipe, head))
    again = load_build(tmp_path / "out" / "recipe.yaml")
    assert again.recipe.adapt is None
    assert again.spec.params.path == head
    assert again.recipe.model_dir == build.recipe.model_dir
    assert again.recipe.speculation.choices == build.recipe.speculation.choices


def test_compile_adapts_first_and_builds_the_head_the_gate_chose(tmp_path, monkeypatch, capsys):
    import specbuild.adapt.run as run

    recipe = write(tmp_path, "  max_steps: 3")
    new_head = tmp_path / "adapt" / "adapt-compile" / "head"
    calls = []

    def shipped(build, options, progress=None, notice=None):
        calls.append(options.out)
        shutil.copytree(TINY / "eagle", new_head)
        adapted = options.out / "recipe.yaml"
        adapted.write_text(adapted_recipe_text(build.recipe, new_head))
        return run.AdaptResult(options.out, True, "shipped: test", new_head, adapted, {"shipped": True})

    monkeypatch.setattr(run, "run_adapt", shipped)
    monkeypatch.chdir(tmp_path)
    assert main(["compile", str(recipe), "--no-validate", "--cache-dir", str(tmp_path / "cache")]) == 0
    assert calls == [(tmp_path / "adapt" / "adapt-compile").absolute()]
    config = json.loads((tmp_path / "engines" / "adapt-compile" / "target" / "config.json").read_text())
    prov = json.loads((tmp_path / "engines" / "adapt-compile" / "target" / "provenance.json").read_text())
    assert prov["checkpoints"]["speculation.checkpoint"]["path"] == str(new_head)
    assert config["specbuild"]["method"] == "eagle"
    assert "building" in capsys.readouterr().err


def test_compile_keeps_the_recipes_head_when_the_gate_refuses(tmp_path, monkeypatch, capsys):
    import specbuild.adapt.run as run

    recipe = write(tmp_path, "  max_steps: 0")

    def refused(build, options, progress=None, notice=None):
        return run.AdaptResult(options.out, False, "not shipped: test", TINY / "eagle", None, {"shipped": False})

    monkeypatch.setattr(run, "run_adapt", refused)
    monkeypatch.chdir(tmp_path)
    assert main(["compile", str(recipe), "--no-validate", "--cache-dir", str(tmp_path / "cache")]) == 0
    prov = json.loads((tmp_path / "engines" / "adapt-compile" / "target" / "provenance.json").read_text())
    assert prov["checkpoints"]["speculation.checkpoint"]["path"] == str(TINY / "eagle")
    assert "not shipped: test" in capsys.readouterr().err
