"""`specbuild check` is complete: whatever `plan` would refuse because of the recipe, `check` reports first.

Walks every example recipe, every invalid recipe, and variants of the examples that hit each runtime's refusals,
with and without --trtllm-examples: when `load_build` (what `check` runs) accepts a recipe, `plan_build` must not
raise for it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from specbuild.errors import RecipeError, UserError
from specbuild.plan import Layout
from specbuild.planning import plan_build
from specbuild.load import load_build
from specbuild.runtimes.base import BuildOptions

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "recipes").glob("**/*.yaml"))
INVALID = sorted((ROOT / "tests" / "recipes" / "invalid").glob("*.yaml"))

# Changes that make a valid example hit a rule of its runtime (field path -> value).
VARIANTS = {
    "dtype-bfloat16": {("model", "dtype"): "bfloat16"},
    "quantized": {("build", "quantization"): "int8_weight_only"},
    "fp8": {("build", "quantization"): "fp8"},
    "eagle-3-layers": {("speculation", "num_eagle_layers"): 3},
    "continuous-kv": {("build", "kv_cache_type"): "continuous"},
    "tp2": {("build", "tp_size"): 2},
    "sampling": {("validation", "sampling"): {"trials": 10}},
    "gpt2-architecture": {"architecture": "GPT2LMHeadModel"},
}


def _variant(example: Path, changes: dict, tmp_path: Path) -> Path:
    data = YAML(typ="safe").load(example.read_text())
    for path, value in changes.items():
        if path == "architecture":
            src = (example.parent / data["model"]["checkpoint"]).resolve()
            ckpt = tmp_path / "ckpt"
            ckpt.mkdir()
            for f in src.iterdir():
                (ckpt / f.name).symlink_to(f)
            (ckpt / "config.json").unlink()
            cfg = json.loads((src / "config.json").read_text())
            cfg["architectures"] = [value]
            (ckpt / "config.json").write_text(json.dumps(cfg))
            data["model"]["checkpoint"] = str(ckpt)
            continue
        node = data
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = value
    for section, key in (("model", "checkpoint"), ("model", "tokenizer"), ("speculation", "checkpoint")):
        value = (data.get(section) or {}).get(key)
        if value and not Path(value).is_absolute():
            data[section][key] = str((example.parent / value).resolve())
    out = tmp_path / example.name
    with out.open("w") as f:
        YAML().dump(data, f)
    return out


def _parity(path: Path, tmp_path: Path) -> None:
    for examples in (None, str(tmp_path / "examples")):
        options = BuildOptions(trtllm_examples=examples)
        try:
            build = load_build(path, options=options)
        except RecipeError:
            continue  # check refuses it: nothing more to compare
        layout = Layout(tmp_path / "engines", tmp_path / "repo", tmp_path / "reports", build.recipe.name)
        try:
            plan_build(build, layout)
        except UserError as e:
            pytest.fail(f"check accepts {path.name} (--trtllm-examples {examples}) but plan refuses it: {e}")


@pytest.mark.parametrize("path", EXAMPLES + INVALID, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_plan_never_refuses_what_check_accepts(path, tmp_path):
    _parity(path, tmp_path)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_parity_on_variants(example, variant, tmp_path):
    _parity(_variant(example, VARIANTS[variant], tmp_path), tmp_path)


def test_check_reports_what_plan_would_refuse_with_its_location(tmp_path):
    """The first variant that used to pass `check` and fail `plan` without a location (issue #11)."""
    path = _variant(ROOT / "recipes" / "tensorrt-llm" / "medusa.yaml", VARIANTS["dtype-bfloat16"], tmp_path)
    with pytest.raises(RecipeError) as info:
        load_build(path)
    problem = next(p for p in info.value.problems if p.field == "model.dtype")
    assert problem.line is not None and "--trtllm-examples" in problem.message
    load_build(path, options=BuildOptions(trtllm_examples=str(tmp_path)))  # with the example converter: fine
