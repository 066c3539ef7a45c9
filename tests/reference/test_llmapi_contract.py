"""The llmapi tensor contract of the CPU rehearsal model, without a server (specbuild.reference.llmapi_contract):
request tensors -> SamplingParams semantics, the text the LLM reports, and the response tensors
(llmapi config.pbtxt@c8c6df0, model.py@b35ac1b, helpers.py@0df60f9)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from specbuild.repository.llmapi.tensors import PERF_OUTPUTS
from specbuild.reference.llmapi_contract import (
    DEFAULT_MAX_TOKENS,
    Detokenizer,
    RequestError,
    is_stop,
    parse_request,
    response_tensors,
)

TINY = Path(__file__).resolve().parents[2] / "checkpoints" / "tiny"


def tensors(**values):
    """A request as `get(name)`: strings become BYTES arrays, scalars [1] arrays."""
    arrays = {}
    for name, v in values.items():
        if isinstance(v, np.ndarray):
            arrays[name] = v
        elif isinstance(v, (list, tuple)):
            arrays[name] = np.array([x.encode() if isinstance(x, str) else x for x in v], dtype=object)
        elif isinstance(v, (str, bytes)):
            arrays[name] = np.array([v.encode() if isinstance(v, str) else v], dtype=object)
        else:
            arrays[name] = np.array([v])
    return arrays.get


def test_defaults_are_the_llmapi_models():
    r = parse_request(tensors(text_input="hi"))
    assert (r.prompt, r.max_tokens, r.streaming) == ("hi", DEFAULT_MAX_TOKENS, False)
    assert r.exclude_input_from_output is False  # the model's own default: the prompt is echoed
    assert r.return_perf_metrics is False and not any(r.outputs.values())
    assert (r.temperature, r.top_k, r.top_p) == (0.0, 0, 1.0)  # nothing set: greedy


def test_only_the_first_prompt_is_used():
    assert parse_request(tensors(text_input=["first", "second"])).prompt == "first"


@pytest.mark.parametrize(
    "values, want",
    [
        ({"sampling_param_temperature": 0.0, "sampling_param_top_k": 40}, (0.0, 0, 1.0)),
        ({"sampling_param_top_k": 1, "sampling_param_temperature": 0.7}, (0.0, 0, 1.0)),
        ({"sampling_param_top_p": 0.0}, (0.0, 0, 1.0)),
        ({"sampling_param_temperature": 0.7}, (0.7, 0, 1.0)),
        ({"sampling_param_top_k": 5}, (1.0, 5, 1.0)),
        ({"sampling_param_top_p": 0.9, "sampling_param_temperature": 0.5}, (0.5, 0, 0.9)),
    ],
)
def test_greedy_or_sampling_as_torchsampler_decides(values, want):
    r = parse_request(
        tensors(
            text_input="x",
            **{k: np.array([v], dtype=np.float32 if isinstance(v, float) else np.int32) for k, v in values.items()},
        )
    )
    assert (r.temperature, r.top_k, r.top_p) == pytest.approx(want)


@pytest.mark.parametrize("name", ["sampling_param_max_tokens", "streaming", "stop", "return_finish_reason"])
def test_scalars_must_be_scalars(name):
    get = tensors(text_input="x", **{name: np.array([1, 2])})
    with pytest.raises(RequestError, match=f"^Expected a scalar tensor for tensor {name}$"):
        is_stop(get) if name == "stop" else parse_request(get)


@pytest.mark.parametrize(
    "values, message",
    [
        ({}, r"^text_input is missing from the request$"),
        ({"text_input": b"\xff\xfe"}, r"text_input: 'utf-8' codec can't decode byte 0xff"),
        ({"text_input": "x", "sampling_param_best_of": 2}, r"sampling_param_best_of=2 is not supported"),
        (
            {"text_input": "x", "sampling_param_presence_penalty": np.array([np.inf], dtype=np.float32)},
            r"sampling_param_presence_penalty=inf is invalid",
        ),
        (
            {"text_input": "x", "sampling_param_frequency_penalty": np.array([np.nan], dtype=np.float32)},
            r"sampling_param_frequency_penalty=nan is invalid",
        ),
        ({"text_input": "x", "lora_name": "adapter"}, r"lora_name is not supported"),
        ({"text_input": "x", "image_url": "http://x/y.png"}, r"image_url is not supported"),
        (
            {"text_input": "x", "sampling_param_temperature": np.array([-1.0], dtype=np.float32)},
            r"require temperature >= 0, got temperature=-1.0",
        ),
        ({"text_input": "x", "sampling_param_top_p": np.array([2.0], dtype=np.float32)}, r"require 0 <= top_p <= 1"),
        ({"text_input": "x", "sampling_param_max_tokens": -3}, r"require max_tokens >= 1, got max_tokens=-3"),
    ],
)
def test_requests_refused_with_one_sentence(values, message):
    with pytest.raises(RequestError, match=message):
        parse_request(tensors(**values))


def test_neutral_values_of_refused_inputs_are_accepted():
    r = parse_request(tensors(text_input="x", sampling_param_best_of=1))
    assert r.prompt == "x"


def test_presence_and_frequency_penalties_are_read():
    r = parse_request(
        tensors(
            text_input="x",
            sampling_param_presence_penalty=np.array([0.5], dtype=np.float32),
            sampling_param_frequency_penalty=np.array([-0.25], dtype=np.float32),
        )
    )
    assert (r.presence_penalty, r.frequency_penalty) == (0.5, -0.25)
    assert (
        parse_request(tensors(text_input="x")).presence_penalty,
        parse_request(tensors(text_input="x")).frequency_penalty,
    ) == (0.0, 0.0)


def test_response_tensors_only_what_was_asked_as_bytes():
    r = parse_request(tensors(text_input="x"))
    out = response_tensors(r, "hello", "length", None, None)
    assert list(out) == ["text_output"] and out["text_output"].dtype == object
    asked = parse_request(
        tensors(
            text_input="x",
            return_finish_reason=True,
            return_stop_reason=True,
            return_cumulative_logprob=True,
            sampling_param_return_perf_metrics=True,
        )
    )
    perf = {t.name: i for i, t in enumerate(PERF_OUTPUTS)}
    perf["acceptance_rate"] = 0.25
    out = response_tensors(asked, "hello", "stop", "\n\n", perf)
    assert out["finish_reason"].tolist() == [b"stop"] and out["stop_reason"].tolist() == [b"\n\n"]
    assert out["cumulative_logprob"].tolist() == [b"None"]
    assert out["acceptance_rate"].tolist() == [b"0.25"] and out["total_draft_tokens"].tolist() == [b"11"]
    assert len(out) == 4 + 12 and all(a.dtype == object and a.shape == (1,) for a in out.values())


@pytest.fixture(scope="module")
def tokenizer():
    if not (TINY / "target" / "tokenizer.json").is_file():
        pytest.skip("checkpoints/tiny not built")
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(TINY / "target"))


def test_text_is_cumulative_and_echoes_the_prompt_unless_excluded(tokenizer):
    prompt_ids = tokenizer.encode("def add(a, b):")
    gen = tokenizer.encode("\n    return a + b", add_special_tokens=False)
    echo = Detokenizer(tokenizer, prompt_ids, parse_request(tensors(text_input="def add(a, b):")))
    plain = Detokenizer(
        tokenizer,
        prompt_ids,
        parse_request(tensors(text_input="def add(a, b):", sampling_param_exclude_input_from_output=True)),
    )
    texts = []
    for t in gen:
        echo.add([t])
        plain.add([t])
        texts.append(plain.text(final=False))
    assert all(b.startswith(a) for a, b in zip(texts, texts[1:]))
    assert plain.text(final=True) == "\n    return a + b"
    assert echo.text(final=True) == "def add(a, b):\n    return a + b"


def test_a_stop_string_ends_the_text_right_before_it(tokenizer):
    req = parse_request(
        tensors(text_input="x", sampling_param_stop=["b", "zz"], sampling_param_exclude_input_from_output=True)
    )
    d = Detokenizer(tokenizer, tokenizer.encode("x"), req)
    stopped = [d.add([t]) for t in tokenizer.encode("\n    return a + b\n", add_special_tokens=False)]
    assert stopped[-1] and d.stop_reason == "b"
    assert d.text(final=True) == "\n    return a + "
    assert not any(stopped[: stopped.index(True)])  # stopped exactly when the string appeared


def test_an_incomplete_character_is_held_back_until_final(tokenizer):
    ids = tokenizer.encode("é", add_special_tokens=False)
    req = parse_request(tensors(text_input="x", sampling_param_exclude_input_from_output=True))
    d = Detokenizer(tokenizer, [], req)
    if len(ids) < 2:
        pytest.skip("the tokenizer has a single token for é")
    d.add(ids[:1])
    assert "\ufffd" not in d.text(final=False)
    d.add(ids[1:])
    assert d.text(final=False) == "é"
