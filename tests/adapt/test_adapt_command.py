"""`specbuild adapt` end to end on the tiny zoo (reference runtime, EAGLE-1 chain), a handful of training steps: the
documented outputs, the build cache and bitwise reproducibility, `--max-steps 0`, bad input, a failure after the
traffic was read and an interrupted run."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from specbuild.cli import main
from specbuild.errors import UserError

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "checkpoints" / "tiny"
STEPS = "3"

RECIPE = """\
name: adapt-tiny
runtime: reference
model:
  checkpoint: {tiny}/target
  dtype: float32
speculation:
  method: eagle
  checkpoint: {tiny}/eagle
  num_eagle_layers: 3
  max_draft_len: 3
  max_non_leaves_per_layer: 1
  choices: [[0], [0, 0], [0, 0, 0]]
build:
  max_batch_size: 8
validation:
  max_tokens: 12
adapt:
  eval_every: 1
"""


def traffic_lines(per_category: int) -> list[str]:
    lines = []
    for i in range(per_category):
        lines.append(
            json.dumps({"id": f"code-{i}", "category": "code", "prompt": f"def f{i}(x):\n    return x + {i}\n"})
        )
        lines.append(
            json.dumps({"id": f"sum-{i}", "category": "sums", "prompt": f"{i} + {2 * i} = {3 * i}\n{i + 1} + "})
        )
    return lines


def folder_digest(folder: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            h.update(path.relative_to(folder).as_posix().encode() + path.read_bytes())
    return h.hexdigest()


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    import torch

    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("adapt")
    recipe = root / "tiny.yaml"
    recipe.write_text(RECIPE.format(tiny=TINY))
    traffic = root / "traffic.jsonl"
    traffic.write_text("\n".join(traffic_lines(12)) + "\n")
    return {"root": root, "recipe": recipe, "traffic": traffic, "cache": root / "cache"}


def adapt(setup, out: Path, *extra: str) -> int:
    argv = ["adapt", str(setup["recipe"]), "--traffic", str(setup["traffic"]), "--out", str(out)]
    return main([*argv, "--cache-dir", str(setup["cache"]), *extra])


@pytest.fixture(scope="module")
def first(setup):
    out = setup["root"] / "one"
    code = adapt(setup, out, "--max-steps", STEPS)
    return {"code": code, "out": out, "adapt": json.loads((out / "adapt.json").read_text())}


def test_the_run_writes_the_documented_outputs(first, setup):
    a, out = first["adapt"], first["out"]
    assert first["code"] == (0 if a["shipped"] else 1)
    assert isinstance(a["reason"], str) and a["reason"].startswith("shipped" if a["shipped"] else "not shipped")
    assert Path(a["head"]).is_absolute() and Path(a["head"]).is_dir()
    assert set(a["categories"]) == {"code", "sums"}
    for c in a["categories"].values():
        assert set(c) >= {"before", "after", "held_out", "gated"} and c["gated"] is False  # 12 records < 20
        assert (
            set(c["before"]) == {"al", "low", "high"} and c["before"]["low"] <= c["before"]["al"] <= c["before"]["high"]
        )
    assert set(a["overall"]) >= {"before", "after"}
    assert sum(c["held_out"] for c in a["categories"].values()) == a["overall"]["held_out"] > 0
    for name in ("report.md", "report.json", "junit.xml", "provenance.json", "training_curve.png", "before_after.png"):
        assert (out / name).is_file(), name
    prov = json.loads((out / "provenance.json").read_text())["adapt"]
    assert prov["traffic"]["digest"] == a["traffic"]["digest"]
    assert prov["base_head"]["path"] == str(TINY / "eagle") and len(prov["base_head"]["content_sha256"]) == 64
    assert prov["training"]["steps"] == int(STEPS) and prov["training"]["seed"] == 0
    report = json.loads((out / "report.json").read_text())
    assert len(report["training"]["losses"]) == int(STEPS)
    assert report["teacher"]["chunks_computed"] > 0
    head = out / ("head" if a["shipped"] else "candidate")
    assert {p.name for p in head.iterdir()} == {"config.json", "pytorch_model.bin"}
    if a["shipped"]:
        assert a["recipe"] == str(out / "recipe.yaml")
        assert main(["check", str(out / "recipe.yaml")]) == 0
    else:
        assert not (out / "head").exists() and not (out / "recipe.yaml").exists()
        assert a["head"] == str(TINY / "eagle")


def test_a_rerun_regenerates_nothing_and_trains_the_same_bytes(first, setup):
    out = setup["root"] / "two"
    code = adapt(setup, out, "--max-steps", STEPS)
    a = json.loads((out / "adapt.json").read_text())
    assert code == first["code"] and a["overall"] == first["adapt"]["overall"]
    report = json.loads((out / "report.json").read_text())
    assert report["teacher"]["chunks_computed"] == 0 and report["teacher"]["chunks_from_cache"] > 0
    name = "head" if a["shipped"] else "candidate"
    assert folder_digest(out / name) == folder_digest(first["out"] / name)


def test_the_same_inputs_into_the_same_folder_reuse_it(first, setup):
    from specbuild.adapt.run import AdaptOptions, run_adapt
    from specbuild.load import load_build

    before = (first["out"] / "adapt.json").stat().st_mtime_ns
    build = load_build(setup["recipe"])
    options = AdaptOptions(
        out=first["out"], traffic=setup["traffic"], overrides={"max_steps": int(STEPS)}, cache_dir=setup["cache"]
    )
    result = run_adapt(build, options)
    assert result.reused and result.shipped == first["adapt"]["shipped"]
    assert (first["out"] / "adapt.json").stat().st_mtime_ns == before


def test_max_steps_0_ends_not_shipped_and_leaves_the_old_head(first, setup, capsys):
    old = folder_digest(TINY / "eagle")
    out = setup["root"] / "zero"
    capsys.readouterr()
    assert adapt(setup, out, "--max-steps", "0", "--json") == 1
    document = json.loads(capsys.readouterr().out)
    assert document["command"] == "adapt" and document["verdict"] == "not-shipped" and document["exit_code"] == 1
    a = json.loads((out / "adapt.json").read_text())
    assert document["adapt"] == a and document["outputs"] == {"adapt": str(out.absolute())}
    assert a["shipped"] is False and "max_steps is 0" in a["reason"]
    assert a["head"] == str(TINY / "eagle") and not (out / "head").exists()
    assert folder_digest(TINY / "eagle") == old


@pytest.mark.parametrize("content", ["", "\n\n"])
def test_empty_traffic_is_refused_before_anything_is_written(setup, tmp_path, content, capsys):
    empty = tmp_path / "empty.jsonl"
    empty.write_text(content)
    out = tmp_path / "out"
    code = main(["adapt", str(setup["recipe"]), "--traffic", str(empty), "--out", str(out)])
    assert code == 2 and not out.exists()
    assert "empty.jsonl" in capsys.readouterr().err


def test_a_missing_traffic_file_and_a_method_without_weights_are_user_errors(setup, tmp_path, capsys):
    assert (
        main(["adapt", str(setup["recipe"]), "--traffic", str(tmp_path / "nope.jsonl"), "--out", str(tmp_path / "o")])
        == 2
    )
    assert "nope.jsonl" in capsys.readouterr().err
    lookup = ROOT / "recipes" / "reference" / "prompt_lookup.yaml"
    assert main(["adapt", str(lookup), "--traffic", str(setup["traffic"]), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "prompt_lookup" in err and not (tmp_path / "o").exists()


def test_a_failure_after_the_traffic_is_read_still_writes_adapt_json(first, setup, monkeypatch):
    import specbuild.adapt.run as run

    def boom(*a, **k):
        raise UserError("the training stopped: lower adapt.learning_rate")

    monkeypatch.setattr(run, "train_head", boom)
    out = setup["root"] / "failed"
    assert adapt(setup, out, "--max-steps", STEPS) == 2
    a = json.loads((out / "adapt.json").read_text())
    assert a["shipped"] is False and "lower adapt.learning_rate" in a["reason"]
    assert a["head"] == str(TINY / "eagle")


def test_an_interrupted_run_leaves_the_folder_as_it_was(first, setup, monkeypatch):
    import specbuild.adapt.run as run

    out = setup["root"] / "two"  # a complete earlier run
    before = folder_digest(out)

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(run, "train_head", interrupted)
    with pytest.raises(KeyboardInterrupt):
        from specbuild.adapt.run import AdaptOptions, run_adapt
        from specbuild.load import load_build

        options = AdaptOptions(out=out, traffic=setup["traffic"], overrides={"max_steps": 2}, cache_dir=setup["cache"])
        run_adapt(load_build(setup["recipe"]), options)
    assert folder_digest(out) == before
    assert not [p for p in out.parent.iterdir() if ".partial-" in p.name]


def test_tiny_traffic_is_read_judged_and_not_shipped_with_the_reason(setup, tmp_path):
    tiny = tmp_path / "tiny.jsonl"
    tiny.write_text("\n".join(traffic_lines(12)[:3]) + "\n")  # 3 records: nothing left for dev
    out = tmp_path / "out"
    argv = ["adapt", str(setup["recipe"]), "--traffic", str(tiny), "--out", str(out), "--max-steps", STEPS]
    assert main([*argv, "--cache-dir", str(setup["cache"])]) == 1
    a = json.loads((out / "adapt.json").read_text())
    assert a["shipped"] is False and "too little to train" in a["reason"] and a["head"] == str(TINY / "eagle")
    assert a["traffic"]["records"] == 3 and a["overall"]["held_out"] == a["traffic"]["held_out"]
    assert not (out / "head").exists() and not (out / "candidate").exists()
