"""The one definition of which request values are refused: sampling values and lengths, where they enter a
specbuild Triton model (preprocessing, the BLS, the reference tensorrt_llm) and in the llm-api reference core
(specbuild/reference/llmapi_contract.py, which words the same refusals as TensorRT-LLM's SamplingParams does).
Copied into each python model's 1/ folder by the repository writer; standard library only, so it runs in NVIDIA's
containers. (Engine and deployment sizes are specbuild/facts/bounds.py's.)

The rules are TensorRT-LLM's (executor SamplingConfig checkers, `cpp/tensorrt_llm/executor/samplingConfig.cpp`,
the backend's `inflight_batcher_llm/src/utils.cc` getSamplingConfigFromTensors, and `SamplingParams._validate` in
`tensorrt_llm/sampling_params.py`), with tightenings both lack: every float must be finite (the C++ and the LLM
API accept temperature +inf, the LLM API a NaN top_p), and a negative top_p is refused (the C++ treats any
top_p <= 0 as unset; 0 stays accepted: "unset" for the C++ backend, as NVIDIA's inflight_batcher_llm_client.py
sends it, greedy for the LLM API's TorchSampler).
The `*_ok` predicates are the rules; each `*_problem` function words a refusal for the engine contract and returns
a problem sentence, or None when the value is fine.
"""

import math

MAX_TOKENS_MESSAGE = "max_tokens must be a single value > 0"  # the BLS's wording (tensorrt_llm_bls lib/decode.py)


def _finite(value):
    try:
        return math.isfinite(value)  # numpy scalars too
    except TypeError:
        return False


def temperature_ok(value):
    """None (unset), or a finite number >= 0 (0: greedy)."""
    return value is None or (_finite(value) and value >= 0)


def top_p_ok(value):
    """None, or a finite number in [0, 1] (0: unset for the C++ backend, greedy for the LLM API)."""
    return value is None or (_finite(value) and 0 <= value <= 1)


def top_k_ok(value):
    """None, or >= 0 (0: unset)."""
    return value is None or value >= 0


def max_tokens_ok(value):
    """Given and > 0."""
    return value is not None and value > 0


def repetition_penalty_ok(value):
    """None, or a finite number > 0 (1: none)."""
    return value is None or (_finite(value) and value > 0)


def additive_penalty_ok(value):
    """presence_penalty / frequency_penalty: None, or any finite number (0: none)."""
    return value is None or _finite(value)


def temperature_problem(value, name="temperature"):
    if not temperature_ok(value):
        return (f"{name}={value} is invalid: it must be a finite number >= 0, 0 for greedy (TensorRT-LLM: "
                "Assertion failed: temperature.value() >= 0.f)")
    return None


def top_p_problem(value, name="top_p"):
    """top_p in (0, 1]; 0 means unset (the C++ backend resets top_p <= 0 to unset)."""
    if not top_p_ok(value):
        return (f"{name}={value} is invalid: it must be in (0, 1], or 0 for unset (TensorRT-LLM: Assertion failed: "
                "topP.value() > 0.f && topP.value() <= 1.f)")
    return None


def top_k_problem(value, name="top_k"):
    if not top_k_ok(value):
        return f"{name}={value} is invalid: it must be >= 0, 0 for unset (TensorRT-LLM: Assertion failed: topK.value() >= 0)"
    return None


def max_tokens_problem(value, name="max_tokens"):
    """max_tokens is required and positive."""
    if value is None:
        return f"{name} is required: {MAX_TOKENS_MESSAGE}"
    if not max_tokens_ok(value):
        return f"{name}={value}: {MAX_TOKENS_MESSAGE}"
    return None


def penalty_problems(repetition=None, presence=None, frequency=None,
                     names=("repetition_penalty", "presence_penalty", "frequency_penalty")):
    """The penalties of one request row: repetition_penalty > 0 (TensorRT-LLM's checkRepetitionPenalty), presence
    and frequency penalties any finite number (the C++ checks neither; an infinite one is refused here)."""
    found = []
    if not repetition_penalty_ok(repetition):
        found.append(f"{names[0]}={repetition} is invalid: it must be a finite number > 0, 1 for none (TensorRT-LLM: "
                     "Repetition penalty should be strictly greater than zero)")
    for name, value in zip(names[1:], (presence, frequency)):
        if not additive_penalty_ok(value):
            found.append(f"{name}={value} is invalid: it must be a finite number, 0 for none")
    return found


def sampling_problems(temperature=None, top_k=None, top_p=None, names=("temperature", "top_k", "top_p")):
    """Every problem of one request row's sampling values, as sentences."""
    found = [temperature_problem(temperature, names[0]), top_k_problem(top_k, names[1]), top_p_problem(top_p, names[2])]
    return [p for p in found if p]


def min_tokens_value(min_tokens, min_length):
    """The minimum length of a request that may carry either spelling (min_tokens since TensorRT-LLM 0.20,
    min_length before it and in GenAI-Perf's TensorRT-LLM converter). Returns (value or None, problem or None)."""
    if min_tokens is not None and min_length is not None and int(min_tokens) != int(min_length):
        return None, (f"min_tokens={min_tokens} and min_length={min_length} disagree: min_length is the old name of "
                      "min_tokens, send one of them")
    value = min_tokens if min_tokens is not None else min_length
    if value is not None and value < 0:
        return None, (f"min_tokens={value} is invalid: it must be >= 0 (TensorRT-LLM: Assertion failed: "
                      "minTokens.value() >= 0)")
    return (None if value is None else int(value)), None
