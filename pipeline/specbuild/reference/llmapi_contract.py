"""The request/response contract of NVIDIA's llmapi `tensorrt_llm` model (TensorRT-LLM
triton_backend/all_models/llmapi/tensorrt_llm/config.pbtxt@c8c6df0 and 1/model.py@b35ac1b), for the CPU rehearsal model
(reference/core_models/llm_api/model.py): tensors in -> a typed request, the text and perf values out -> response
tensors. numpy only (tensors are read through a `get(name) -> ndarray | None` callable), so it is tested without a
server.

Request (helpers.py `get_sampling_params_from_request`, `get_output_config_from_request`; model.py
`_convert_request`):
  - text_input: only element 0 is the prompt (UTF-8); missing -> "text_input is missing from the request"
  - every other input is a scalar: `tensor.size != 1` -> "Expected a scalar tensor for tensor <name>"
  - sampling_param_* -> SamplingParams fields; absent ones keep the LLM defaults (max_tokens 32, greedy), except
    the model's own defaults best_of 1, exclude_input_from_output False (the prompt is echoed) and
    return_perf_metrics False; sampling_param_stop is a list of strings
  - greedy as TensorRT-LLM's TorchSampler decides (`_request_strategy`): nothing set, temperature 0, top_k 1 or
    top_p 0 -> greedy; otherwise sampling with temperature (default 1.0), top_k (0 / None = off), top_p (1 = off)
  - `stop: true` with the request id cancels that request (handled by the model)
  - sampling_param_frequency_penalty / presence_penalty: served, as TensorRT-LLM's TorchSampler applies them
    (before the temperature, PR #16485; the prompt counts, SamplingParams.prompt_ignore_length defaulting to 0),
    at every verified position given its draft path; any finite value
  - which values are refused is request_checks.py's rule (specbuild/standalone/request_checks.py), the same as
    the engine contract's: a temperature, top_p or penalty that is not finite, a negative temperature or top_k, a
    top_p outside [0, 1], max_tokens < 1; worded as SamplingParams._validate words them ("require top_k >= 0, got
    top_k=-1"), where TensorRT-LLM itself lets +inf and NaN through
What the reference runtime cannot honour is refused with one sentence naming the input: best_of > 1, LoRA and
image_url (the newest template's inputs, @0a71057), whether they arrive as inputs (declared by the 1.3 template) or
as request parameters (Triton's generate endpoint turns a JSON field that names no declared input into a request
parameter, which NVIDIA's model would never read: the request would be answered as if it were absent). Every
RequestError goes out as TritonError INVALID_ARG (HTTP 400, gRPC INVALID_ARGUMENT) with NVIDIA's wording.

Response (model.py `_create_response`): text_output [1] BYTES (the cumulative text; the prompt first unless
exclude_input_from_output), finish_reason / stop_reason / cumulative_logprob only when return_<name> is true,
and with return_perf_metrics the 12 perf tensors, every optional one as BYTES strings (str() of the value).
cumulative_logprob is "None", as NVIDIA's model sends it: its SamplingParams never set `logprobs`, and on the
PyTorch backend the LLM asks the executor for log probs only then (tensorrt_llm/sampling_params.py
`_get_output_config`: `return_log_probs = bool(self.logprobs)`), so CompletionOutput.cumulative_logprob stays None.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from specbuild.repository.llmapi.tensors import PERF_OUTPUTS
from specbuild.standalone import request_checks as checks

DEFAULT_MAX_TOKENS = 32  # SamplingParams.max_tokens (TensorRT-LLM tensorrt_llm/sampling_params.py)
REPLACEMENT = "\ufffd"
# Inputs of the newest llmapi config.pbtxt (@0a71057) the reference runtime cannot honour: input -> the feature
REFUSED_INPUTS = {
    "image_url": "multimodal input (it serves text models)",
    "lora_id": "a LoRA adapter",
    "lora_name": "a LoRA adapter",
    "lora_path": "a LoRA adapter",
    "lora_ckpt_source": "a LoRA adapter",
}
FINISH_REASONS = {"end_id": "stop", "stop_words": "stop", "length": "length", "cancelled": "cancelled"}

Get = Callable[[str], "np.ndarray | None"]


class RequestError(Exception):
    """A request the model answers with an error (the message NVIDIA's model would give where it has one)."""


@dataclass(frozen=True)
class LlmApiRequest:
    prompt: str
    streaming: bool
    max_tokens: int
    temperature: float  # 0.0: greedy
    top_k: int  # 0: off
    top_p: float  # 1.0: off
    seed: int | None
    stop: tuple[str, ...]
    exclude_input_from_output: bool
    return_perf_metrics: bool
    outputs: dict[str, bool] = field(default_factory=dict)  # return_finish_reason/stop_reason/cumulative_logprob
    presence_penalty: float = 0.0  # 0: off
    frequency_penalty: float = 0.0  # 0: off


def scalar(get: Get, name: str) -> Any:
    """helpers.py `get_input_scalar_by_name`: None when absent; the one value otherwise."""
    a = get(name)
    if a is None:
        return None
    if a.size != 1:
        raise RequestError(f"Expected a scalar tensor for tensor {name}")
    return a.reshape(-1)[0].item()


def is_stop(get: Get) -> bool:
    return bool(scalar(get, "stop"))


def _text(value: Any, name: str) -> str:
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError as e:
            raise RequestError(
                f"{name}: 'utf-8' codec can't decode byte 0x{value[e.start]:02x} in position {e.start}: {e.reason}"
            ) from None
    return str(value)


def parse_request(get: Get, parameters: frozenset[str] = frozenset()) -> LlmApiRequest:
    """The request as SamplingParams would hold it; RequestError for what NVIDIA's model or the LLM refuses, and
    for what the reference runtime cannot honour. `parameters`: the names of the request's parameters (where the
    generate endpoint puts fields that name no declared input)."""
    text = get("text_input")
    if text is None:
        raise RequestError("text_input is missing from the request")
    if text.ndim > 1:
        raise RequestError("The current implementation only supports text_input being a 1D tensor.")
    if text.size == 0:
        raise RequestError("text_input is empty (give one prompt)")
    prompt = _text(text.reshape(-1)[0], "text_input")  # text_input[0]: further prompts are ignored (model.py@b35ac1b)
    for name, feature in REFUSED_INPUTS.items():
        if get(name) is not None or name in parameters:
            raise RequestError(
                f"{name} is not supported: the reference runtime cannot serve {feature} — leave {name} out, or "
                "serve with runtime: tensorrt-llm"
            )
    best_of = scalar(get, "sampling_param_best_of")
    if best_of is not None and int(best_of) != 1:
        raise RequestError(
            f"sampling_param_best_of={best_of} is not supported: the reference runtime returns one "
            "sequence (best_of 1) — leave it out or send 1"
        )
    penalties = {}
    for name in ("frequency_penalty", "presence_penalty"):
        value = scalar(get, f"sampling_param_{name}")
        if not checks.additive_penalty_ok(value):
            raise RequestError(f"sampling_param_{name}={value} is invalid: it must be a finite number, 0 for none")
        penalties[name] = 0.0 if value is None else float(value)
    temperature, top_k, top_p = (scalar(get, f"sampling_param_{n}") for n in ("temperature", "top_k", "top_p"))
    if not checks.temperature_ok(temperature):
        raise RequestError(
            f"require temperature >= 0, got temperature={temperature}"
            if not temperature >= 0
            else f"require a finite temperature, got temperature={temperature}"
        )
    if not checks.top_p_ok(top_p):
        raise RequestError(f"require 0 <= top_p <= 1, got top_p={top_p}")
    if not checks.top_k_ok(top_k):
        raise RequestError(f"require top_k >= 0, got top_k={top_k}")
    max_tokens = scalar(get, "sampling_param_max_tokens")
    max_tokens = DEFAULT_MAX_TOKENS if max_tokens is None else int(max_tokens)
    if not checks.max_tokens_ok(max_tokens):
        raise RequestError(f"require max_tokens >= 1, got max_tokens={max_tokens}")
    seed = scalar(get, "sampling_param_seed")
    stop = get("sampling_param_stop")
    stops = (
        tuple(s for s in (_text(v, "sampling_param_stop") for v in stop.reshape(-1)) if s) if stop is not None else ()
    )
    t, k, p = _strategy(temperature, top_k, top_p)
    return LlmApiRequest(
        prompt=prompt,
        streaming=bool(scalar(get, "streaming") or False),
        max_tokens=max_tokens,
        temperature=t,
        top_k=k,
        top_p=p,
        seed=None if seed is None else int(seed),
        stop=stops,
        exclude_input_from_output=bool(_or(scalar(get, "sampling_param_exclude_input_from_output"), False)),
        return_perf_metrics=bool(_or(scalar(get, "sampling_param_return_perf_metrics"), False)),
        outputs={
            name: bool(_or(scalar(get, f"return_{name}"), False))
            for name in ("finish_reason", "stop_reason", "cumulative_logprob")
        },
        **penalties,
    )


def _or(value, default):
    return default if value is None else value


def _strategy(temperature, top_k, top_p) -> tuple[float, int, float]:
    """(temperature, top_k, top_p) of TorchSampler's `_request_strategy` (tensorrt_llm/_torch/pyexecutor/sampler.py;
    its tests, test_torch_sampler.py TestStrategySelection): greedy is temperature 0.0."""
    if temperature is None and top_k is None and top_p is None:
        return 0.0, 0, 1.0
    if (
        (temperature is not None and float(temperature) == 0.0)
        or (top_k is not None and int(top_k) == 1)
        or (top_p is not None and float(top_p) == 0.0)
    ):
        return 0.0, 0, 1.0
    return (
        1.0 if temperature is None else float(temperature),
        0 if top_k is None else int(top_k),
        1.0 if top_p is None else float(top_p),
    )


# ---------------------------------------------------------------------------------------------------- text out
class Detokenizer:
    """The request's text as the LLM reports it, step by step: `CompletionOutput.text` (cumulative), the prompt
    first unless exclude_input_from_output (the LLM then decodes prompt + output tokens); a stop string ends the
    text just before it (the LLM drops the stop tokens: include_stop_str_in_output is False); while streaming,
    a trailing incomplete UTF-8 character is held back until its bytes arrive (incremental detokenization)."""

    def __init__(self, tokenizer, prompt_ids: list[int], request: LlmApiRequest):
        self.tokenizer = tokenizer
        self.prompt_ids = list(prompt_ids)
        self.request = request
        self.ids: list[int] = []
        self.stop_reason: str | None = None

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def add(self, new_ids: list[int]) -> bool:
        """Append generated tokens; True when a stop string now appears in the generated text."""
        self.ids.extend(new_ids)
        if self.stop_reason is None and self.request.stop:
            generated = self._decode(self.ids)
            hits = [(generated.find(s), s) for s in self.request.stop if s in generated]
            if hits:
                self.stop_reason = min(hits)[1]
        return self.stop_reason is not None

    def text(self, final: bool) -> str:
        generated = self._decode(self.ids)
        cut = 0
        if self.stop_reason is not None:
            cut = len(generated) - generated.find(self.stop_reason)
        text = generated if self.request.exclude_input_from_output else self._decode(self.prompt_ids + self.ids)
        if cut:
            text = text[: len(text) - cut]
        if not final:
            text = text.rstrip(REPLACEMENT)
        return text


# ---------------------------------------------------------------------------------------------------- tensors out
def _bytes(values) -> np.ndarray:
    return np.array([str(v).encode("utf-8") for v in values], dtype=np.object_)


def response_tensors(
    request: LlmApiRequest, text: str, finish_reason: str | None, stop_reason: str | None, perf: dict[str, Any] | None
) -> dict[str, np.ndarray]:
    """The output tensors of one response, by name (BYTES object arrays)."""
    out = {"text_output": np.array([text.encode("utf-8")], dtype=np.object_)}
    values = {
        "finish_reason": finish_reason,
        "stop_reason": stop_reason,
        "cumulative_logprob": None,
    }  # NVIDIA's model asks for no logprobs: the LLM leaves it None
    for name, value in values.items():
        if request.outputs.get(name):
            out[name] = _bytes([value])
    if request.return_perf_metrics and perf is not None:
        for tensor in PERF_OUTPUTS:
            out[tensor.name] = _bytes([perf[tensor.name]])
    return out


def error_text(e: Exception) -> str:
    """model.py `_execute_single_request`: every failure is answered "Error generating request: <e>"."""
    return f"Error generating request: {e}"
