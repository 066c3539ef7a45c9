"""Checkpoints that cannot work are refused by `specbuild check` with the field located, at once, without reading
unbounded data or blocking (issue #16): a FIFO or device as config.json, JSON of the wrong shape, a malformed
tokenizer.json, no weights, symlinks escaping the checkpoint, tree ranks beyond the vocabulary."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).parent
CKPT = HERE / "ckpt"
ROOT = HERE.parents[1]


def _checkpoint(tmp_path: Path, name: str = "target") -> Path:
    folder = tmp_path / name
    shutil.copytree(CKPT / name, folder)
    return folder


def _recipe(tmp_path: Path, checkpoint: Path, speculation: dict | None = None) -> Path:
    recipe = {"name": "hostile", "model": {"checkpoint": str(checkpoint)}, "validation": {"max_tokens": 8}}
    if speculation:
        recipe["speculation"] = speculation
    path = tmp_path / "recipe.yaml"
    path.write_text(json.dumps(recipe))
    return path


def _check(path: Path) -> tuple[int, str, float]:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "pipeline"))
    start = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-m", "specbuild.cli", "check", str(path)], capture_output=True, text=True, timeout=30, env=env
    )
    return out.returncode, out.stderr, time.monotonic() - start


def _fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


CASES = {
    "config-fifo": (lambda d: _fifo(d / "config.json"), "model.checkpoint", "FIFO"),
    "config-device": (
        lambda d: ((d / "config.json").unlink(), (d / "config.json").symlink_to("/dev/zero")),
        "model.checkpoint",
        "outside",
    ),
    "config-array": (lambda d: (d / "config.json").write_text("[1, 2]"), "model.checkpoint", "JSON object"),
    "config-not-json": (lambda d: (d / "config.json").write_text("{vocab"), "model.checkpoint", "not valid JSON"),
    "config-huge": (
        lambda d: (d / "config.json").write_text('{"pad": "' + "x" * (5 << 20) + '"}'),
        "model.checkpoint",
        "at most",
    ),
    "no-weights": (lambda d: (d / "model.safetensors").unlink(), "model.checkpoint", "no weights"),
    "tokenizer-shape": (
        lambda d: (d / "tokenizer.json").write_text('{"model": 3}'),
        "model.checkpoint",
        'no "model" object',
    ),
    "tokenizer-broken": (
        lambda d: (d / "tokenizer.json").write_text('{"model": {"type": "WordLevel"}}'),
        "model.checkpoint",
        "does not load with the tokenizers library",
    ),
    "tokenizer-fifo": (lambda d: _fifo(d / "tokenizer.json"), "model.checkpoint", "FIFO"),
    "tokenizer-of-a-larger-vocabulary": (
        lambda d: _grow_vocabulary(d / "tokenizer.json", 8),
        "model.checkpoint",
        "another model's tokenizer",
    ),
}


def _grow_vocabulary(path: Path, extra: int) -> None:
    """The tokenizer of a model with `extra` more tokens than this checkpoint's config.json has embeddings for."""
    data = json.loads(path.read_text())
    vocab = data["model"]["vocab"]
    top = max(vocab.values())
    vocab.update({f"extra{i}": top + 1 + i for i in range(extra)})
    path.write_text(json.dumps(data))


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_hostile_checkpoint_is_a_located_user_error(case, tmp_path):
    damage, field, words = CASES[case]
    folder = _checkpoint(tmp_path)
    damage(folder)
    code, err, seconds = _check(_recipe(tmp_path, folder))
    assert code == 2 and f"{field}:" in err and words in err, err
    assert "Traceback" not in err and "internal error" not in err
    assert ":5:" in err or ":1:" in err  # located at the field (file:line:col)


def test_tree_ranks_beyond_the_vocabulary_are_refused(tmp_path):
    vocab = json.loads((CKPT / "target" / "config.json").read_text())["vocab_size"]
    path = _recipe(
        tmp_path,
        CKPT / "target",
        {
            "method": "medusa",
            "checkpoint": str(CKPT / "medusa"),
            "num_heads": 2,
            "choices": [[0], [vocab + 3]],
            "max_draft_len": 2,
        },
    )
    code, err, _ = _check(path)
    assert code == 2 and f"asks for rank {vocab + 3} but the vocabulary has {vocab}" in err, err


def test_a_draft_without_weights_is_refused(tmp_path):
    draft = _checkpoint(tmp_path, "draft")
    (draft / "model.safetensors").unlink()
    code, err, _ = _check(_recipe(tmp_path, CKPT / "target", {"method": "draft_target", "checkpoint": str(draft)}))
    assert code == 2 and "speculation.checkpoint:" in err and "has no weights" in err, err


ZOO = ROOT / "checkpoints" / "tiny"
HOSTILE_HEAD_FIELDS = [  # what the head/target preflight reads, of the wrong type or shape
    {"rope_scaling": "yarn"},
    {"rope_scaling": {"rope_type": 4, "factor": "big"}},
    {"rope_theta": [1]},
    {"rope_parameters": ["default"]},
    {"torch_dtype": 5},
    {"dtype": None},
    {"quantization_config": ["fp8"]},
    {"quantization_config": {"quant_method": None}},
    {"max_position_embeddings": True},
    {"hidden_size": "256"},
    {"vocab_size": -1},
    {"draft_vocab_size": 0.5},
    {"target_hidden_size": [256]},
    {"base_model_name_or_path": "a\x00b"},
    {"base_model_name_or_path": "../" * 2000},
    {"speculators_config": {"verifier": "x"}},
    {"speculators_config": [1]},
    {"speculators_config": {"verifier": {"architectures": "LlamaForCausalLM", "name_or_path": 3}}},
    {"transformer_layer_config": [1]},
    {"transformer_layer_config": {"hidden_size": {"a": 1}}},
]


@pytest.mark.parametrize("method", ["medusa", "eagle3"])
def test_hostile_head_config_fields_never_crash_the_preflight(method, tmp_path):
    """Whatever a head's config.json holds where the preflight looks, `check` answers with a verdict, located
    problems or none, never an internal error."""
    from specbuild.errors import RecipeError
    from specbuild.recipe import load_recipe

    spec = (
        {"method": "medusa", "num_heads": 4}
        if method == "medusa"
        else {"method": "eagle3", "max_draft_len": 4, "layers_to_capture": [0, 1, 3]}
    )
    original = json.loads((ZOO / method / "config.json").read_text())
    for i, fields in enumerate(HOSTILE_HEAD_FIELDS):
        head = tmp_path / f"{method}{i}"
        shutil.copytree(ZOO / method, head)
        (head / "config.json").write_text(json.dumps({**original, **fields}))
        recipe = {
            "name": "hostile",
            "runtime": "reference",
            "model": {"checkpoint": str(ZOO / "target"), "tokenizer": str(ZOO / "tokenizer")},
            "speculation": {**spec, "checkpoint": str(head)},
        }
        if method == "eagle3":
            recipe["flavour"] = "llm-api"
        path = tmp_path / f"{method}{i}.yaml"
        path.write_text(json.dumps(recipe))
        try:
            load_recipe(path)
        except RecipeError as e:
            assert all(p.line is not None for p in e.problems), (fields, str(e))
