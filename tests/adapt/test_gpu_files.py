"""The LLM arguments adapt's GPU side hands TensorRT-LLM (docs/gpu.md §10), checked against the LLM API's argument
classes as the test double enforces them (tests/doubles/tensorrt_llm/llmapi/llm_args.py), per release line: the
answers pass (the recipe's model.yaml) and the SaveState hidden-state pass."""

from __future__ import annotations

import importlib.util
from dataclasses import replace
from pathlib import Path

import pytest

from specbuild.adapt.runtimes.trtllm import save_state_config, teacher_model_yaml
from specbuild.load import load_build

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "recipes" / "tensorrt-llm" / "llmapi_eagle3.yaml"


@pytest.fixture(autouse=True)
def no_wheel_needed(monkeypatch):
    """The double's parse path imports tensorrt_llm for its version; every call here names the release line."""
    import sys
    import types

    monkeypatch.setitem(sys.modules, "tensorrt_llm", types.SimpleNamespace(__version__="0.0"))


def double():
    path = ROOT / "tests" / "doubles" / "tensorrt_llm" / "llmapi" / "llm_args.py"
    spec = importlib.util.spec_from_file_location("llm_args_double", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def parsed(args: dict, line: str, llm_args) -> dict:
    """What LLM(**args) receives after NVIDIA's model hands model.yaml through update_llm_args_with_extra_dict."""
    spec = args.get("speculative_config")
    if isinstance(spec, dict) and llm_args.parse_path(line) == "from_dict":
        args = {**args, "speculative_config": llm_args.DecodingBaseConfig.from_dict(dict(spec), line)}
    return args


@pytest.mark.parametrize("release", ["1.1", "1.2", "1.3"])
def test_the_answers_and_the_hidden_state_passes_are_valid_llm_arguments(release, tmp_path):
    llm_args = double()
    build = load_build(RECIPE)
    recipe = build.recipe.model_copy(update={"llm_api": build.recipe.llm_api.model_copy(update={"release": release})})
    build = replace(build, recipe=recipe)
    layers = (0, 1, 3)
    answers = teacher_model_yaml(build, build.spec, None, None)
    assert answers["speculative_config"]["decoding_type"] in ("Eagle", "Eagle3")
    assert llm_args.validate(parsed(answers, release, llm_args), release) == []
    states = teacher_model_yaml(build, build.spec, tmp_path / "save_state", layers)
    assert states["speculative_config"]["decoding_type"] == "SaveState"
    assert states["speculative_config"]["eagle3_layers_to_capture"] == [-1, 0, 1, 3]
    assert states["max_batch_size"] == 1 and states["cuda_graph_config"] is None
    if release == "1.2":  # 1.2's llm_args.py was not read: the double refuses what it cannot vouch for
        with pytest.raises(ValueError, match="Invalid decoding type: SaveState"):
            parsed(states, release, llm_args)
    else:
        assert llm_args.validate(parsed(states, release, llm_args), release) == []


def test_save_state_is_refused_by_a_release_that_lacks_it(tmp_path):
    llm_args = double()
    config = save_state_config(tmp_path, (1,))
    with pytest.raises(ValueError, match="Invalid decoding type: SaveState"):
        llm_args.DecodingBaseConfig.from_dict(config, "1.0")
    assert llm_args.validate_speculative_config({**config, "output_directory": ""}, "1.3") == [
        "speculative_config.output_directory: Field required"
    ]
