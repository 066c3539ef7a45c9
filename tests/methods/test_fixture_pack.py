"""A method is one folder: `echo` (tests/methods/fixture_pack/, nothing of it in the package) is registered here and
goes through check, plan and the reference runtime (the llm-api flavour's repository, its model.yaml read back by
the CPU rehearsal, and the pack's decoder run by the executor) like the packs that ship."""

from __future__ import annotations

from pathlib import Path

import pytest
from fixture_pack import PACK

from specbuild import methods
from specbuild.errors import RecipeError
from specbuild.load import load_build
from specbuild.methods import METHODS, register, unregister
from specbuild.plan import Layout
from specbuild.planning import plan_build
from specbuild.recipe.schema import Recipe

ROOT = Path(__file__).resolve().parents[2]
TARGET = ROOT / "checkpoints" / "tiny" / "target"


@pytest.fixture(scope="module", autouse=True)
def echo():
    register(PACK)
    yield PACK
    unregister(PACK.name)


def recipe_file(tmp_path: Path, *, flavour="llm-api", release="1.3", max_draft_len=3, name="echo") -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(
        f"name: {name}\nruntime: reference\nflavour: {flavour}\nmodel:\n  checkpoint: {TARGET}\n  dtype: float32\n"
        f"speculation:\n  method: echo\n  max_draft_len: {max_draft_len}\nllm_api:\n  release: '{release}'\n"
    )
    return path


def problems(path: Path) -> list[str]:
    with pytest.raises(RecipeError) as caught:
        load_build(path)
    return [f"{p.field}: {p.message}" for p in caught.value.problems]


def test_the_registry_takes_the_pack_and_the_recipe_its_section():
    assert METHODS["echo"] is PACK
    assert "EchoConfig" in Recipe.model_json_schema()["$defs"]
    with pytest.raises(ValueError, match="registered already"):
        register(PACK)


def test_check_runs_the_pack_s_rules_and_its_refusals(tmp_path):
    build = load_build(recipe_file(tmp_path))
    assert build.method is PACK and build.spec.method == "echo"
    assert methods.pack_for(build.spec) is PACK
    assert problems(recipe_file(tmp_path, max_draft_len=9)) == [
        "speculation.max_draft_len: is 9 but echo copies at most 8 — lower it"
    ]
    refused = problems(recipe_file(tmp_path, release="1.2"))
    assert refused == [
        "speculation.method: echo is not in TensorRT-LLM's LLM API (Echo arrived in 1.3; tensorrt_llm/llmapi/"
        "llm_args.py) — use llm_api.release: 1.3"
    ]
    engine = problems(recipe_file(tmp_path, flavour="engine"))
    assert engine and all("exists only in the llm-api flavour" in p for p in engine)


def test_plan_writes_the_pack_s_model_yaml(tmp_path):
    build = load_build(recipe_file(tmp_path))
    plan = plan_build(build, Layout(tmp_path / "engines", tmp_path / "repo", tmp_path / "reports", "echo"))
    (repository,) = [s for s in plan.steps if s.kind == "repository" and s.role == "target"]
    assert repository.info["model.yaml"]["speculative_config"] == {"decoding_type": "Echo", "max_draft_len": 3}
    assert "echo on the reference runtime (llm-api flavour)" in plan.render()


def test_the_reference_runtime_decodes_it_losslessly(tmp_path):
    import torch

    from specbuild.reference.decoder.executor import Executor, Request, SamplingConfig
    from specbuild.reference.llmapi_engine import build_engines
    from specbuild.reference.llmapi_yaml import read_model_yaml

    torch.set_num_threads(1)
    build = load_build(recipe_file(tmp_path))
    layout = Layout(tmp_path / "engines", tmp_path / "repo", tmp_path / "reports", "echo")
    served = {}
    for role in ("target", "baseline"):
        repository = build.runtime.write_repository(build.recipe, build.spec, layout, role)
        served[role] = read_model_yaml(repository / "tensorrt_llm" / "1" / "model.yaml")
    assert (served["target"].method, served["target"].max_draft_len) == ("echo", 3)
    assert served["baseline"].method == "none"
    prompts = [[1, 5, 9, 5, 9, 5], [1, 7, 7, 7, 7, 7, 7]]
    greedy = SamplingConfig(temperature=0.0)
    results = {}
    for role, settings in served.items():
        executor = Executor(*build_engines(settings))
        results[role] = executor.run([Request(p, max_new_tokens=12, sampling=greedy) for p in prompts])
        assert executor.method_name == ("echo" if role == "target" else "autoregressive")
    assert [r.output_ids for r in results["target"]] == [r.output_ids for r in results["baseline"]]  # lossless
    assert sum(r.stats.total_draft_tokens for r in results["target"]) > 0  # it drafted
