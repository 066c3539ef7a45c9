"""`adapt.trainer: modelopt` on the tiny zoo's EAGLE-3 head: the worker run in another Python (a child process), the
head it exports read back by the loader the runtimes use, and the same gate.

Without a network these tests run against tests/adapt/modelopt_double, a double of nvidia-modelopt 0.47.0 that
checks the calls against what that release accepts (its docstring says what it enforces). The last test runs the real
Model-Optimizer when its environment is there (SPECBUILD_MODELOPT_PYTHON, or the one `specbuild adapt` made in the
cache dir); it is skipped otherwise: CI downloads nothing."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import torch

from specbuild.adapt.heads import trainer_for
from specbuild.adapt.rows import Row, pad_rows
from specbuild.adapt.train import TrainingPlan
from specbuild.cli import main
from specbuild.heads.eagle3 import load_eagle3_head
from specbuild.load import load_build

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "checkpoints" / "tiny"
EAGLE3_RECIPE = ROOT / "recipes" / "reference" / "llmapi_eagle3.yaml"
DOUBLE = Path(__file__).with_name("modelopt_double")


def double_python(folder: Path, log: Path, fail: str = "") -> Path:
    """A `python` that runs this interpreter with the double on its path (as a virtual environment would hold it)."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "python"
    script.write_text(
        "#!/bin/sh\n"
        f"export PYTHONPATH='{DOUBLE}'\n"
        f"export MODELOPT_DOUBLE_LOG='{log}'\n"
        f"export MODELOPT_DOUBLE_FAIL='{fail}'\n"
        f"exec '{sys.executable}' \"$@\"\n"
    )
    script.chmod(0o755)
    return script


def eagle3_recipe(folder: Path, adapt: str) -> Path:
    """recipes/reference/llmapi_eagle3.yaml with absolute paths and an adapt section."""
    text = EAGLE3_RECIPE.read_text().replace("../../checkpoints", str(ROOT / "checkpoints"))
    recipe = folder / "recipe.yaml"
    recipe.write_text(text.replace("../prompts", str(ROOT / "recipes" / "prompts")) + "adapt:\n" + adapt)
    return recipe


def calls(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.is_file() else []


@pytest.fixture(scope="module")
def target():
    from specbuild.zoo.quality import load_causal_lm

    torch.set_num_threads(1)
    return load_causal_lm(TINY / "target")


def rows_for(target, layers, n: int, seed: int):
    from specbuild.zoo import teacher

    g = torch.Generator().manual_seed(seed)
    prompts = torch.randint(3, 4000, (n, 12), generator=g)
    tokens = teacher.greedy_continue(target, prompts, 8)
    final = teacher.final_features(target, tokens)
    captured = teacher.layer_outputs(target, tokens, layers)
    rows = [Row(tokens[i].tolist(), 12, final[i], captured[i]) for i in range(n)]
    return pad_rows(rows, target.lm_head.weight.detach().float(), 2)


def train(python: Path, target, work: Path, steps: int = 2):
    from specbuild.adapt.modelopt.environment import ensure_environment
    from specbuild.adapt.modelopt.trainer import train_with_modelopt

    build = load_build(EAGLE3_RECIPE)
    trainer = trainer_for(build.spec)
    layers = trainer.captured_layers(build.spec, target)
    plan = TrainingPlan(
        max_steps=steps,
        max_minutes=30,
        learning_rate=1e-3,
        batch_size=2,
        eval_every=1,
        patience=10,
        depth=trainer.depth(build.spec),
        seed=3,
    )
    env = ensure_environment(python)
    module = trainer.load(build.spec, target)
    said: list[str] = []
    trained = train_with_modelopt(
        env,
        trainer,
        module,
        rows_for(target, layers, 6, 0),
        rows_for(target, layers, 2, 1),
        target,
        build.recipe.model_dir,
        plan,
        build.spec.params.path,
        work,
        work / "modelopt.log",
        work / "modelopt.log",
        said.append,
    )
    return trained, said


def test_the_worker_converts_trains_and_exports_through_modelopts_calls(target, tmp_path):
    log = tmp_path / "calls.jsonl"
    trained, said = train(double_python(tmp_path / "env", log), target, tmp_path / "work")
    made = calls(log)
    assert [c["call"] for c in made] == ["load_vlm_or_llm", "convert", "export"]
    assert made[0]["offline"] is True and made[0]["device_map"] == "cpu"
    config = made[1]["config"]
    arch = config["eagle_architecture_config"]
    assert config["eagle_offline"] is True and config["eagle_use_torch_compile"] is False
    assert config["eagle_export_rope_scaling"] == {}  # else a yarn rope_scaling the head was never trained with
    assert arch["head_dim"] == 64 and arch["draft_vocab_size"] == 2048 and arch["has_lm_head"] is True
    assert arch["eagle_aux_hidden_state_layer_ids"] == [0, 1, 3]
    exported = trained.folder
    assert {p.name for p in exported.iterdir()} == {"config.json", "model.safetensors"}
    from safetensors import safe_open

    with safe_open(str(exported / "model.safetensors"), "pt") as f:
        names = set(f.keys())
    assert "layers.0.self_attn.q_proj.weight" in names and not any(n.startswith("midlayer.") for n in names)
    head = load_eagle3_head(exported, target)  # Model-Optimizer's names, read as TensorRT-LLM reads them
    assert head.draft_vocab_size == 2048 and head.layers == (0, 1, 3)
    assert trained.steps == 2 and len(trained.losses) == 2 and trained.dev[0]["step"] == 0
    assert trained.details["trainer"].startswith("nvidia-modelopt 0.47.0")
    assert any("modelopt: step" in m for m in said)
    start = load_eagle3_head(tmp_path / "work" / "start", target)
    assert not torch.equal(start.fc.weight, head.fc.weight.float()) or trained.best_step == 0


def test_a_worker_failure_is_a_user_error_that_names_its_log(target, tmp_path):
    from specbuild.errors import UserError

    python = double_python(tmp_path / "env", tmp_path / "calls.jsonl", fail="convert")
    with pytest.raises(UserError) as e:
        train(python, target, tmp_path / "work")
    message = str(e.value)
    assert str(tmp_path / "work" / "modelopt.log") in message and "trainer: specbuild" in message
    assert "convert failed as asked" in message
    assert "Traceback" in (tmp_path / "work" / "modelopt.log").read_text()


def test_adapt_runs_the_modelopt_trainer_and_gates_its_head(tmp_path):
    log = tmp_path / "calls.jsonl"
    python = double_python(tmp_path / "env", log)
    recipe = eagle3_recipe(tmp_path, f"  trainer: modelopt\n  modelopt_python: {python}\n  eval_every: 1\n")
    traffic = tmp_path / "traffic.jsonl"
    traffic.write_text(
        "".join(
            json.dumps({"category": "code", "prompt": f"def g{i}(items):\n    for item in items:\n"}) + "\n"
            for i in range(10)
        )
    )
    out = tmp_path / "out"
    code = main(
        ["adapt", str(recipe), "--traffic", str(traffic), "--out", str(out), "--max-steps", "2"]
        + ["--cache-dir", str(tmp_path / "cache")]
    )
    a = json.loads((out / "adapt.json").read_text())
    assert code == (0 if a["shipped"] else 1), a["reason"]
    assert a["training"]["external"]["trainer"].startswith("nvidia-modelopt 0.47.0") and a["training"]["steps"] == 2
    assert (out / "modelopt.log").is_file() and [c["call"] for c in calls(log)][-1] == "export"
    prov = json.loads((out / "provenance.json").read_text())["adapt"]["training"]
    assert "modelopt: nvidia-modelopt 0.47.0" in prov["trainer"]
    written = out / ("head" if a["shipped"] else "candidate")
    if a["training"]["best_step"]:
        assert {p.name for p in written.iterdir()} == {"config.json", "model.safetensors"}
    else:
        assert "no weights measured better" in a["reason"]


def test_modelopt_is_refused_for_other_heads_and_for_a_python_without_it(tmp_path, capsys):
    eagle = ROOT / "recipes" / "reference" / "eagle.yaml"
    traffic = tmp_path / "t.jsonl"
    traffic.write_text(json.dumps({"prompt": "def f(x):"}) + "\n")
    out = tmp_path / "out"
    assert main(["adapt", str(eagle), "--traffic", str(traffic), "--out", str(out), "--trainer", "modelopt"]) == 2
    assert "EAGLE-3 heads only" in capsys.readouterr().err and not out.exists()
    recipe = eagle3_recipe(tmp_path, f"  trainer: modelopt\n  modelopt_python: {sys.executable}\n")
    assert main(["adapt", str(recipe), "--traffic", str(traffic), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "nvidia-modelopt is not installed there" in err and "pip install" in err and not out.exists()


def real_modelopt_python() -> Path | None:
    given = os.environ.get("SPECBUILD_MODELOPT_PYTHON")
    if given:
        return Path(given)
    from specbuild.adapt.modelopt import environment

    venv = environment.environments_root() / f"venv-{environment.environment_key()}"
    return environment.python_of(venv) if (venv / environment.READY).is_file() else None


@pytest.mark.skipif(
    real_modelopt_python() is None, reason="no Model-Optimizer environment here (nothing is downloaded)"
)
def test_the_real_modelopt_trains_and_exports_a_head_the_loader_takes_bitwise_again(target, tmp_path):
    python = real_modelopt_python()
    one, _ = train(python, target, tmp_path / "one")
    assert one.details["trainer"].startswith("nvidia-modelopt 0.47.0")
    load_eagle3_head(one.folder, target)
    two, _ = train(python, target, tmp_path / "two")
    assert (one.folder / "model.safetensors").read_bytes() == (two.folder / "model.safetensors").read_bytes()
