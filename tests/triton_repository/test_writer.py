"""write_repository: engine values checked before anything is written; atomic writes; the launch script."""

from __future__ import annotations

import json

import pytest
from repo_helpers import GPU_RECIPES, recipe_from, write_engine_configs

from specbuild.errors import UserError
from specbuild.repository.engine import launch
from specbuild.repository.engine.writer import write_repository
from specbuild.methods import describe
from specbuild.runtimes import runtime_for


def _recipe(stem, **triton):
    recipe = recipe_from(next(p for p in GPU_RECIPES if p.stem == stem))
    if triton:
        recipe = recipe.model_copy(update={"triton": recipe.triton.model_copy(update=triton)})
    return recipe


def _nothing_written(layout):
    return not layout.repo_root.exists() or not any(layout.repo_root.iterdir())


@pytest.mark.parametrize(
    "key, value, field",
    [
        ("max_batch_size", 64, "build.max_batch_size"),
        ("max_draft_len", 7, "speculation.max_draft_len"),
        ("speculative_decoding_mode", 32, "speculation.method"),
        ("max_beam_width", 4, "build.max_beam_width"),
    ],
)
def test_engine_mismatch_is_an_error_before_writing(key, value, field, layout_for):
    recipe = _recipe("medusa")
    layout = layout_for(recipe)
    write_engine_configs(recipe, layout, **{key: value})
    with pytest.raises(UserError) as err:
        write_repository(recipe, describe(recipe), layout, flavour=runtime_for(recipe))
    message = str(err.value)
    assert f"build_config.{key}: the engine has {value}" in message and field in message
    assert str(layout.engine("target") / "config.json") in message
    assert _nothing_written(layout)


def test_lookahead_wng_must_give_the_engine_max_draft_len(layout_for):
    recipe = _recipe("lookahead")
    layout = layout_for(recipe)
    write_engine_configs(recipe, layout)
    cfg_path = layout.engine("target") / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["build_config"]["max_draft_len"] += 1
    cfg_path.write_text(json.dumps(cfg))
    with pytest.raises(UserError, match=r"lookahead \(W=\d+, N=\d+, G=\d+\) needs"):
        write_repository(recipe, describe(recipe), layout, flavour=runtime_for(recipe))
    assert _nothing_written(layout)


def test_draft_engine_is_checked_too(layout_for):
    recipe = _recipe("draft_target")
    layout = layout_for(recipe)
    write_engine_configs(recipe, layout)
    cfg_path = layout.engine("draft") / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["build_config"]["speculative_decoding_mode"] = 2  # a draft engine must be a plain one
    cfg_path.write_text(json.dumps(cfg))
    with pytest.raises(
        UserError,
        match=r"draft/config.json: build_config.speculative_decoding_mode: the engine has 2 "
        r"\(DRAFT_TOKENS_EXTERNAL\), the recipe needs 1 \(NONE\)",
    ):
        write_repository(recipe, describe(recipe), layout, flavour=runtime_for(recipe))


def test_missing_engine_and_wrong_runtime(layout_for):
    recipe = _recipe("none")
    layout = layout_for(recipe)
    with pytest.raises(UserError, match="no engine config — build the engines first"):
        write_repository(recipe, describe(recipe), layout, flavour=runtime_for(recipe))
    reference = recipe.model_copy(update={"runtime": "reference"})
    write_engine_configs(reference, layout)
    with pytest.raises(UserError, match="built for the reference runtime but the recipe says runtime: tensorrt-llm"):
        write_repository(recipe, describe(recipe), layout, flavour=runtime_for(recipe))


def test_write_is_atomic(layout_for, monkeypatch):
    recipe = _recipe("none")
    layout = layout_for(recipe)
    write_engine_configs(recipe, layout)
    first = write_repository(recipe, describe(recipe), layout, flavour=runtime_for(recipe))
    marker = first / "tensorrt_llm" / "config.pbtxt"
    before = marker.read_text()

    def broken(*_a, **_k):
        raise OSError("disk full")

    # fail while the new repository is being written: the old one stays, no partial folder is left behind
    monkeypatch.setattr("pathlib.Path.chmod", broken)
    with pytest.raises(UserError, match="cannot write .*disk full"):
        write_repository(recipe, describe(recipe), layout, flavour=runtime_for(recipe))
    assert marker.read_text() == before
    assert sorted(p.name for p in layout.repo_root.iterdir()) == [recipe.name]


def test_baseline_repository_has_no_speculation(layout_for):
    recipe = _recipe("medusa")
    layout = layout_for(recipe)
    write_engine_configs(recipe, layout, "baseline")
    repo = write_repository(recipe, describe(recipe), layout, "baseline", flavour=runtime_for(recipe))
    assert repo.name == f"{recipe.name}-baseline"
    text = (repo / "tensorrt_llm" / "config.pbtxt").read_text()
    assert "decoding_mode" not in text and "medusa_choices" not in text
    assert str(layout.engine("baseline")) in text


# --- launch script ---------------------------------------------------------------------------------------------


def _ranks(script: str) -> list[str]:
    return [line for line in script.splitlines() if line.lstrip().startswith("-n 1 ")]


def test_leader_mode_one_rank_per_gpu():
    recipe = _recipe("none")
    recipe = recipe.model_copy(update={"build": recipe.build.model_copy(update={"tp_size": 2, "pp_size": 2})})
    script = launch.launch_script(recipe, describe(recipe))
    ranks = _ranks(script)
    assert len(ranks) == 4
    assert "--model-control-mode" not in ranks[0] and '"$@"' in ranks[0]
    assert all("--model-control-mode=explicit --load-model=tensorrt_llm" in r for r in ranks[1:])
    assert "TRTLLM_ORCHESTRATOR" not in script
    assert [f"shm-region-prefix-name=prefix{i}_" in r for i, r in enumerate(ranks)] == [True] * 4


def test_orchestrator_mode_for_draft_target():
    script = launch.launch_script(_recipe("draft_target"), describe(_recipe("draft_target")))
    assert "export TRTLLM_ORCHESTRATOR=1" in script and "TRTLLM_ORCHESTRATOR_SPAWN_PROCESSES=1" in script
    assert len(_ranks(script)) == 1 and "$POOL_ARGS" in _ranks(script)[0]


def test_fast_logits_pre_spawns_ranks_with_participant_ids(layout_for):
    recipe = _recipe("draft_target")
    spec = recipe.speculation.model_copy(update={"use_draft_logits": True, "fast_logits": True, "tp_size": 1})
    recipe = recipe.model_copy(update={"speculation": spec, "build": recipe.build.model_copy(update={"tp_size": 2})})
    script = launch.launch_script(recipe, describe(recipe))
    ranks = _ranks(script)
    assert len(ranks) == 1 + 1 + 2  # orchestrator, draft tp 1, target tp 2
    assert "TRTLLM_ORCHESTRATOR_SPAWN_PROCESSES=0" in script and "POOL_ARGS" not in script
    assert all("--load-model=tensorrt_llm --load-model=tensorrt_llm_draft" in r for r in ranks[1:])
    layout = layout_for(recipe)
    write_engine_configs(recipe, layout)
    repo = write_repository(recipe, describe(recipe), layout, flavour=runtime_for(recipe))
    target = (repo / "tensorrt_llm" / "config.pbtxt").read_text()
    draft = (repo / "tensorrt_llm_draft" / "config.pbtxt").read_text()
    assert 'key: "participant_ids"\n  value {\n    string_value: "2,3"' in target
    assert 'key: "participant_ids"\n  value {\n    string_value: "1"' in draft
    assert 'key: "speculative_decoding_fast_logits"\n  value {\n    string_value: "true"' in target


def test_launch_script_is_executable_and_parses(layout_for):
    import shutil
    import subprocess

    recipe = _recipe("draft_target")
    layout = layout_for(recipe)
    write_engine_configs(recipe, layout)
    script = write_repository(recipe, describe(recipe), layout, flavour=runtime_for(recipe)) / launch.SCRIPT_NAME
    assert script.stat().st_mode & 0o111
    if shutil.which("bash"):
        subprocess.run(["bash", "-n", str(script)], check=True)
