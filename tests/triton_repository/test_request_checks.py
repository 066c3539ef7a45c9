"""The sampling checks our python models run where values enter (standalone/request_checks.py), imported the
way the python backend does (from the model folder, standard library only)."""

from __future__ import annotations

import importlib.util
import math

import numpy as np
import pytest

from specbuild.repository.engine.writer import SHARED_MODULES, STANDALONE
from specbuild.methods import describe
from specbuild.runtimes import runtime_for

_spec = importlib.util.spec_from_file_location("request_checks", STANDALONE / "request_checks.py")
checks = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(checks)


@pytest.mark.parametrize("value", [-1.0, -1e-9, math.nan, math.inf, -math.inf])
def test_bad_temperatures_are_refused_with_tensorrt_llms_rule(value):
    problem = checks.temperature_problem(value)
    assert problem and "temperature" in problem and "temperature.value() >= 0.f" in problem


@pytest.mark.parametrize("value", [None, 0.0, 0.7, 1.0, 1e6])
def test_good_temperatures_pass(value):
    assert checks.temperature_problem(value) is None


def test_top_p_zero_is_unset_as_the_cpp_backend_reads_it():
    assert checks.top_p_problem(0.0) is None  # NVIDIA's inflight_batcher_llm_client.py sends 0.0
    assert checks.top_p_problem(1.0) is None and checks.top_p_problem(0.3) is None
    for bad in (2.0, -0.5, math.nan, 1.0000001):
        assert "(0, 1]" in checks.top_p_problem(bad)


def test_top_k_and_max_tokens():
    assert checks.top_k_problem(0) is None and checks.top_k_problem(40) is None
    assert "topK.value() >= 0" in checks.top_k_problem(-1)
    assert checks.max_tokens_problem(None) == "max_tokens is required: max_tokens must be a single value > 0"
    assert checks.max_tokens_problem(0) == "max_tokens=0: max_tokens must be a single value > 0"
    assert checks.max_tokens_problem(1) is None
    assert checks.sampling_problems(-1.0, -2, 3.0) == [
        checks.temperature_problem(-1.0),
        checks.top_k_problem(-2),
        checks.top_p_problem(3.0),
    ]


def test_min_tokens_and_min_length_are_one_value():
    assert checks.min_tokens_value(None, None) == (None, None)
    assert checks.min_tokens_value(8, None) == (8, None)
    assert checks.min_tokens_value(None, 8) == (8, None)
    assert checks.min_tokens_value(8, 8) == (8, None)
    value, problem = checks.min_tokens_value(3, 4)
    assert value is None and "disagree" in problem
    assert "minTokens.value() >= 0" in checks.min_tokens_value(-1, None)[1]


def test_every_python_model_folder_carries_the_shared_modules(layout_for):
    from repo_helpers import REFERENCE_RECIPES, recipe_from, write_engine_configs

    from specbuild.repository.engine.writer import write_repository

    recipe = recipe_from(next(p for p in REFERENCE_RECIPES if p.stem == "draft_target"))
    layout = layout_for(recipe)
    write_engine_configs(recipe, layout)
    repo = write_repository(recipe, describe(recipe), layout, flavour=runtime_for(recipe))
    python_models = sorted(p.parent.parent.name for p in repo.glob("*/1/model.py"))
    assert python_models == [
        "postprocessing",
        "preprocessing",
        "tensorrt_llm",
        "tensorrt_llm_bls",
        "tensorrt_llm_draft",
    ]
    for model in python_models:
        for name, source in SHARED_MODULES.items():
            assert (repo / model / "1" / name).read_text() == source.read_text(), (model, name)


def test_penalties_follow_tensorrt_llms_sampling_config():
    assert checks.penalty_problems() == [] and checks.penalty_problems(1.3, -0.5, 2.0) == []
    for bad in (0.0, -1.0, math.nan, math.inf):  # checkRepetitionPenalty: strictly greater than zero
        (problem,) = checks.penalty_problems(bad)
        assert "repetition_penalty" in problem and "strictly greater than zero" in problem
    found = checks.penalty_problems(None, math.inf, math.nan)
    assert len(found) == 2 and "presence_penalty=inf" in found[0] and "frequency_penalty=nan" in found[1]


# --- one set of refused values for both contracts -------------------------------------------------------------------
# The engine contract's cores (the reference tensorrt_llm, the BLS, preprocessing) refuse with request_checks' sentences;
# the llm-api core (reference/llmapi_contract.py) with SamplingParams' wording. Both must refuse exactly these.
REFUSED = {
    "temperature": [math.inf, -math.inf, math.nan, -1.0, -1e-9],
    "top_p": [math.nan, math.inf, -math.inf, -0.5, 1.0000001, 2.0],
    "top_k": [-1, -(2**31)],
    "presence_penalty": [math.inf, -math.inf, math.nan],
    "frequency_penalty": [math.inf, -math.inf, math.nan],
    "max_tokens": [0, -5, -(2**31)],
}
ACCEPTED = {
    "temperature": [0.0, -0.0, 0.7, 1.0, 1e6],
    "top_p": [0.0, 0.3, 1.0],
    "top_k": [0, 1, 40, 2**31 - 1],
    "presence_penalty": [0.0, -2.0, 1.5],
    "frequency_penalty": [0.0, -2.0, 1.5],
    "max_tokens": [1, 4],
}


def _engine_refusal(field: str, value) -> str | None:
    """What the engine contract's cores say of the value (reference/core_models/engine/model.py's sampling checks)."""
    if field in ("temperature", "top_k", "top_p"):
        found = checks.sampling_problems(**{field: value})
    elif field == "max_tokens":
        found = [p for p in [checks.max_tokens_problem(value)] if p]
    else:
        found = checks.penalty_problems(**{field.split("_")[0]: value})
    return "; ".join(found) or None


def _llmapi_refusal(field: str, value) -> str | None:
    import numpy as np

    from specbuild.reference.llmapi_contract import RequestError, parse_request

    dtype = np.int32 if field in ("top_k", "max_tokens") else np.float32
    tensors = {
        "text_input": np.array([b"def f():"], dtype=np.object_),
        f"sampling_param_{field}": np.array([value], dtype=dtype),
    }
    try:
        parse_request(tensors.get)
    except RequestError as e:
        return str(e)
    return None


@pytest.mark.parametrize("field, value", [(f, v) for f, vs in REFUSED.items() for v in vs])
def test_both_contracts_refuse_the_same_values_naming_them(field, value):
    shown = str(float(np.float32(value)) if field not in ("top_k", "max_tokens") else value)
    for refusal in (_engine_refusal(field, value), _llmapi_refusal(field, value)):
        assert refusal is not None, (field, value)
        assert f"{field}={shown}" in refusal or f"{field}={value}" in refusal, refusal


@pytest.mark.parametrize("field, value", [(f, v) for f, vs in ACCEPTED.items() for v in vs])
def test_both_contracts_accept_the_same_values(field, value):
    assert _engine_refusal(field, value) is None
    assert _llmapi_refusal(field, value) is None


def test_the_llmapi_wording_is_sampling_params_own():
    """tensorrt_llm/sampling_params.py SamplingParams._validate: 'require temperature >= 0, got temperature=-1'."""
    assert _llmapi_refusal("temperature", -1.0) == "require temperature >= 0, got temperature=-1.0"
    assert _llmapi_refusal("top_p", 2.0) == "require 0 <= top_p <= 1, got top_p=2.0"
    assert _llmapi_refusal("top_k", -1) == "require top_k >= 0, got top_k=-1"
    assert _llmapi_refusal("temperature", math.inf) == "require a finite temperature, got temperature=inf"


@pytest.mark.parametrize("field", ["temperature", "top_k", "presence_penalty", "frequency_penalty"])
def test_the_executor_refuses_the_same_values(field):
    """The reference executor's own check (SamplingConfig.problems, for callers in process) follows the same rules."""
    from specbuild.reference.decoder.sampling import SamplingConfig

    for value in REFUSED[field]:
        assert SamplingConfig(**{field: value}).problems(), (field, value)
    for value in ACCEPTED[field]:
        assert not SamplingConfig(**{field: value}).problems(), (field, value)
