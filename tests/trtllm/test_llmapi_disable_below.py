"""adaptive.disable_below on the llm-api flavour, against the TensorRT-LLM double: release 1.3 writes
acceptance_rate_threshold / acceptance_rate_window_size (llm_args.py@0004396, PR #12905), which the double accepts;
1.0-1.2 are refused with the reason (1.1/1.2 have acceptance_window / acceptance_length_threshold, a length over
completed requests; 1.0 nothing), and the double shows those releases would refuse the new names at model load."""

from __future__ import annotations

import pytest
from trtllm_helpers import compile_repository, double_validates

from specbuild.errors import RecipeError

GATE = {"disable_below": {"acceptance_rate": 0.35, "window": 16}}


@pytest.mark.parametrize("method", ["prompt_lookup", "draft_target", "eagle3"])
def test_release_1_3_writes_the_acceptance_rate_switch(machine, llmapi_recipe, method):
    machine.set("SPECBUILD_DOUBLE_TRTLLM_VERSION", "1.3.0")
    _, repo = compile_repository(llmapi_recipe(method, "1.3", adaptive=GATE))
    yaml_path = repo / "tensorrt_llm" / "1" / "model.yaml"
    from specbuild.repository.llmapi.model_yaml import load

    spec = load(yaml_path.read_text())["speculative_config"]
    assert spec["acceptance_rate_threshold"] == 0.35 and spec["acceptance_rate_window_size"] == 16
    assert "acceptance_window" not in spec and "acceptance_length_threshold" not in spec
    done = double_validates(yaml_path, "1.3")
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.parametrize(
    "release, words", [("1.0", "no acceptance switch"), ("1.1", "acceptance_window"), ("1.2", "acceptance_window")]
)
def test_older_releases_are_refused_with_the_reason(machine, llmapi_recipe, release, words):
    machine.set("SPECBUILD_DOUBLE_TRTLLM_VERSION", f"{release}.0")
    with pytest.raises(RecipeError, match=rf"adaptive.disable_below: TensorRT-LLM {release} has {words}"):
        compile_repository(llmapi_recipe("prompt_lookup", release, adaptive=GATE))


@pytest.mark.parametrize("release", ["1.1", "1.2"])
def test_those_releases_would_refuse_the_new_names_at_model_load(machine, llmapi_recipe, release, tmp_path):
    """The refusal is not caution: a 1.3 model.yaml handed to 1.1/1.2 fails (extra fields)."""
    machine.set("SPECBUILD_DOUBLE_TRTLLM_VERSION", "1.3.0")
    _, repo = compile_repository(llmapi_recipe("prompt_lookup", "1.3", adaptive=GATE))
    done = double_validates(repo / "tensorrt_llm" / "1" / "model.yaml", release)
    assert done.returncode != 0
    assert "acceptance_rate_threshold: Extra inputs are not permitted" in done.stderr


def test_check_says_what_is_not_known_at_1_3(machine, llmapi_recipe, capsys):
    from specbuild.cli import main

    machine.set("SPECBUILD_DOUBLE_TRTLLM_VERSION", "1.3.0")
    assert main(["check", str(llmapi_recipe("prompt_lookup", "1.3", adaptive=GATE))]) == 0
    assert "PR #12905" in capsys.readouterr().out.replace("\n", " ")


def test_the_engine_flavour_refuses_it(machine, llmapi_recipe):
    from specbuild.recipe import load_recipe

    path = llmapi_recipe("prompt_lookup", "1.3", adaptive=GATE)
    text = path.read_text().replace('"flavour": "llm-api"', '"flavour": "engine"')
    engine = path.with_name("engine.yaml")
    engine.write_text(text.replace(', "llm_api": {"release": "1.3"}', ""))
    with pytest.raises(RecipeError, match="adaptive.disable_below: the engine path has no acceptance-rate switch"):
        load_recipe(engine)
