"""The llm-api contract on the client side, without a server: request tensors, cumulative text turned into deltas,
perf values sent as strings; and the acceptance check's fallback for servers whose counters read zero
(TensorRT-LLM <= 1.2.1, NVIDIA/TensorRT-LLM PR #17082)."""

from __future__ import annotations

from dataclasses import dataclass, field

from specbuild.methods import describe
from specbuild.recipe.schema import Recipe
from specbuild.validate.checks import acceptance
from specbuild.validate.checks.base import SuiteContext, SuiteOptions
from specbuild.validate.client import LLM_API, Generation, GenerateParams, Output
from specbuild.validate.endpoints import Endpoints
from specbuild.recipe.prompts import Prompt


def test_llmapi_inputs_are_nvidias_tensor_names():
    greedy = LLM_API.inputs(GenerateParams(max_tokens=8, stop_words=["\n\n"]), "hi", stream=True)
    assert greedy == {
        "text_input": "hi",
        "sampling_param_max_tokens": 8,
        "sampling_param_top_k": 1,
        "sampling_param_stop": ["\n\n"],
        "sampling_param_exclude_input_from_output": True,
        "sampling_param_return_perf_metrics": True,
        "streaming": True,
    }
    sampled = LLM_API.inputs(
        GenerateParams(
            max_tokens=2, temperature=0.8, top_p=0.9, seed=7, exclude_input_in_output=None, return_perf_metrics=False
        ),
        "hi",
        stream=False,
    )
    assert sampled == {
        "text_input": "hi",
        "sampling_param_max_tokens": 2,
        "sampling_param_temperature": 0.8,
        "sampling_param_top_p": 0.9,
        "sampling_param_seed": 7,
        "streaming": False,
    }
    assert LLM_API.http_body({"text_input": ""}, "r-1") == {"text_input": "", "id": "r-1"}


def test_cumulative_text_becomes_deltas_and_a_shorter_last_text_wins():
    gen = Generation("http-stream", 0.0)
    for t, text in enumerate(["def", "def f(", "def f(x):", "def f(x):"]):
        LLM_API.absorb(gen, Output(text, None, {}), float(t))
    assert [c.text for c in gen.chunks] == ["def", " f(", "x):", ""] and gen.text == "def f(x):"
    LLM_API.absorb(gen, Output("def f", None, {}), 4.0)  # a stop string trimmed on the last response
    assert gen.text == "def f" and gen.chunks[-1].text == "" and gen.ids is None


def test_perf_values_arrive_as_strings():
    out = LLM_API.parse_json(
        {
            "text_output": "a",
            "acceptance_rate": "0.5",
            "total_draft_tokens": "4",
            "total_accepted_draft_tokens": "2",
            "arrival_time_ns": "76735247746000",
            "cumulative_logprob": "None",
            "output_ids": [1, 2],
        }
    )
    assert out.text == "a" and out.ids is None  # NVIDIA's model has no output_ids
    assert out.perf == {
        "acceptance_rate": 0.5,
        "total_draft_tokens": 4.0,
        "total_accepted_draft_tokens": 2.0,
        "arrival_time_ns": 76735247746000.0,
    }


# --- the acceptance check's zero-counter fallback -----------------------------------------------------------

PROMPTS = [Prompt(i, f"p{i}", "code", f"prompt {i}") for i in range(2)]


class Tokens:
    """A tokenizer of one token per character."""

    def encode(self, text):
        return [ord(c) for c in text]


@dataclass
class FakeLlmApi:
    """Answers every prompt with 9 characters (= 9 tokens) streamed in 4 responses: 1 (prefill) + 3 + 3 + 2."""

    counters: tuple[int, int]  # total_accepted_draft_tokens, total_draft_tokens
    streams: bool = True
    contract: object = LLM_API
    role: str = "target"
    label: str = "speculative"
    endpoints: Endpoints = field(default_factory=lambda: Endpoints("127.0.0.1:1"))

    def generate(self, prompt, params, protocol="http", **_):
        gen = Generation(protocol, 0.0, end=1.0, final=True)
        accepted, drafted = self.counters
        perf = {
            "total_accepted_draft_tokens": accepted,
            "total_draft_tokens": drafted,
            "acceptance_rate": accepted / drafted if drafted else 0.0,
        }
        texts = ["a", "abcd", "abcdefg", "abcdefghi"] if protocol != "http" else ["abcdefghi"]
        for t, text in enumerate(texts):
            LLM_API.absorb(gen, Output(text, None, perf), float(t))
        return gen


def context(target, gate=2.0) -> SuiteContext:
    recipe = Recipe.model_validate(
        {
            "name": "t",
            "runtime": "reference",
            "flavour": "llm-api",
            "model": {"checkpoint": "m"},
            "speculation": {"method": "prompt_lookup", "max_draft_len": 3},
            "validation": {"min_acceptance_length": gate},
        }
    )
    return SuiteContext(
        recipe, describe(recipe), PROMPTS, target, None, Tokens(), SuiteOptions(), lambda stage, done, total: None
    )


def test_real_counters_give_al_with_steps_from_the_stream():
    result = acceptance.run(context(FakeLlmApi(counters=(5, 9))))
    assert result.status == "passed", result.summary
    # 3 steps after the prefill's response: AL = 1 + 5 / 3
    assert result.details["steps"] == 6 and abs(result.details["mean_acceptance_length"] - (1 + 10 / 6)) < 1e-9
    assert result.details["steps_from"] == ["stream"] and "zero_counters" not in result.details


def test_zero_counters_fall_back_on_the_stream_and_say_so():
    result = acceptance.run(context(FakeLlmApi(counters=(0, 0))))
    assert result.status == "passed", result.summary
    assert result.details["zero_counters"] and "PR #17082" in result.summary
    # (9 tokens - 1) / (4 responses - 1) per request
    assert abs(result.details["mean_acceptance_length"] - 8 / 3) < 1e-9 and result.details["acceptance_rate"] is None
    assert "estimated from the stream" in result.summary


def test_zero_counters_cannot_decide_a_per_category_gate():
    result = acceptance.run(context(FakeLlmApi(counters=(0, 0)), gate={"default": 2.0}))
    assert result.status == "inconclusive" and not result.ok
    assert result.summary.startswith("inconclusive: the per-category gate needs the speculative counters")


def test_zero_counters_without_a_stream_cannot_pass_the_gate():
    result = acceptance.run(context(FakeLlmApi(counters=(0, 0), streams=False)))
    assert result.status == "failed" and "does not stream" in result.summary


def test_without_a_client_tokenizer_acceptance_says_why_it_cannot_count():
    """No token ids in llm-api responses and no tokenizer to count the text: the check says so and why, instead of
    claiming the server returned no acceptance outputs."""
    from dataclasses import replace

    ctx = replace(
        context(FakeLlmApi(counters=(5, 9))),
        tokenizer=None,
        tokenizer_problem="/models/vicuna: tokenizer.model is a SentencePiece model, which needs the "
        "sentencepiece package",
    )
    result = acceptance.run(ctx)
    assert result.status == "failed"  # min_acceptance_length is set: the gate cannot be judged
    assert result.summary == (
        "output tokens cannot be counted: the responses carry no token ids and there is no "
        f"client tokenizer ({ctx.tokenizer_problem})"
    )
