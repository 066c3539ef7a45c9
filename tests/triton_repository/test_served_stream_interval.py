"""triton.stream_interval through the served repositories (the real CPU tritonserver): the reference core of the
engine flavour (parameter stream_interval of tensorrt_llm, reached through the ensemble) and the llm-api reference
model (stream_interval in model.yaml) stream a response on a request's first decoding step, every N-th and its
last (TensorRT-LLM's PyExecutor rule), instead of one per step.

Checked against the same server's non-streamed answer: the streamed tokens (and log probs) concatenated equal the
whole output, and the number of responses is what the rule gives for the steps decoded (no speculation here, so
one token per step: steps = tokens).
"""

from __future__ import annotations

import json
import math
import urllib.request

import numpy as np
import pytest
from repo_helpers import ROOT

from specbuild.methods import describe
from specbuild.plan import Layout
from specbuild.recipe.schema import Recipe
from specbuild.runtimes import runtime_for
from specbuild.runtimes.build import resolve_build

pytestmark = pytest.mark.timeout(900)

TINY = ROOT / "checkpoints" / "tiny"
INTERVAL = 3
PROMPTS = ["def add(a, b):", "class Stack:\n    def push(self, item):"]
MAX_TOKENS = 20


def responses_for(steps: int, interval: int) -> int:
    """Responses of a streamed request that decoded `steps` steps: step 1, every multiple of interval, the last."""
    return len({1, steps} | {k for k in range(interval, steps + 1, interval)})


def test_the_rule():
    assert [responses_for(s, 1) for s in (1, 2, 5)] == [1, 2, 5]  # the default: one per step
    assert responses_for(20, 3) == 1 + 6 + 1  # 1, 3, 6, ..., 18, 20
    assert responses_for(18, 3) == 1 + 6  # the last step is a multiple
    assert responses_for(20, 4) == 1 + 5 <= math.ceil(20 / 4) + 1


def post(server, model: str, body: dict, endpoint: str) -> str:
    req = urllib.request.Request(
        f"{server.http_url}/v2/models/{model}/{endpoint}",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=120) as r:
        return r.read().decode()


def events(text: str) -> list[dict]:
    out = [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: ")]
    assert out and not any("error" in e for e in out), text[:500]
    return out


def flat(value) -> list:
    return [value] if not isinstance(value, list) else [x for v in value for x in flat(v)]


# ---------------------------------------------------------------------------------------------- engine flavour
@pytest.fixture(scope="module")
def engine_server(tmp_path_factory):
    import torch

    from specbuild.compile import build_engines
    from specbuild.serve import TritonServer
    from specbuild.repository.engine.writer import write_repository

    torch.set_num_threads(1)
    if not (TINY / "target" / "config.json").is_file():
        pytest.skip("checkpoints/tiny is not in this checkout")
    recipe = Recipe.model_validate(
        {
            "name": "stream-interval",
            "runtime": "reference",
            "model": {"checkpoint": str(TINY / "target"), "dtype": "float32"},
            "build": {"max_batch_size": 4, "max_input_len": 64, "max_seq_len": 128},
            "triton": {"streaming": True, "stream_interval": INTERVAL},
            "validation": {"require_lossless": False},
        }
    )
    from specbuild.recipe.loader import general_findings

    assert list(general_findings(resolve_build(recipe))) == []
    root = tmp_path_factory.mktemp("stream-interval")
    layout = Layout(root / "engines", root / "triton_repo", root / "reports", recipe.name)
    build_engines(resolve_build(recipe), layout)
    repo = write_repository(recipe, describe(recipe), layout, flavour=runtime_for(recipe))
    with TritonServer(repo, log_path=root / "tritonserver.log") as server:
        yield repo, server


def test_the_core_has_the_parameter(engine_server):
    repo, _ = engine_server
    config = (repo / "tensorrt_llm" / "config.pbtxt").read_text()
    assert f'key: "stream_interval"\n  value {{\n    string_value: "{INTERVAL}"' in config


@pytest.mark.parametrize("prompt", PROMPTS)
def test_engine_flavour_streams_every_n_steps(engine_server, prompt):
    _, server = engine_server
    body = {"text_input": prompt, "max_tokens": MAX_TOKENS, "exclude_input_in_output": True, "return_log_probs": True}
    whole = json.loads(post(server, "ensemble", dict(body, stream=False), "generate"))
    streamed = events(post(server, "ensemble", dict(body, stream=True), "generate_stream"))
    ids = [t for t in flat(whole["output_ids"]) if t != -1]
    got = [t for e in streamed for t in flat(e["output_ids"]) if t != -1]
    assert got == ids and len(ids) > INTERVAL
    log_probs = [x for e in streamed for x in flat(e["output_log_probs"])]
    assert np.allclose(log_probs, flat(whole["output_log_probs"])[: len(ids)], atol=1e-5)
    assert np.isclose(streamed[-1]["cum_log_probs"], whole["cum_log_probs"], atol=1e-4)
    assert len(streamed) == responses_for(len(ids), INTERVAL) < len(ids)


# ---------------------------------------------------------------------------------------------- llm-api flavour
@pytest.fixture(scope="module")
def llmapi_server(tmp_path_factory):
    from specbuild.repository.llmapi.model_yaml import load
    from specbuild.serve import TritonServer

    if not (TINY / "target" / "config.json").is_file():
        pytest.skip("checkpoints/tiny is not in this checkout")
    recipe = Recipe.model_validate(
        {
            "name": "llmapi-stream-interval",
            "runtime": "reference",
            "flavour": "llm-api",
            "model": {"checkpoint": str(TINY / "target"), "dtype": "float32"},
            "build": {"max_batch_size": 4, "max_input_len": 64, "max_seq_len": 128},
            "triton": {"streaming": True, "stream_interval": INTERVAL},
        }
    )
    root = tmp_path_factory.mktemp("llmapi-stream-interval")
    layout = Layout(root / "engines", root / "triton_repo", root / "reports", recipe.name)
    repo = runtime_for(recipe).write_repository(recipe, describe(recipe), layout, "target")
    assert load((repo / "tensorrt_llm" / "1" / "model.yaml").read_text())["stream_interval"] == INTERVAL
    with TritonServer(repo, log_path=root / "tritonserver.log") as server:
        yield server


@pytest.mark.parametrize("prompt", PROMPTS)
def test_llmapi_flavour_streams_every_n_steps(llmapi_server, prompt):
    body = {
        "text_input": prompt,
        "sampling_param_max_tokens": MAX_TOKENS,
        "exclude_input_in_output": True,
        "return_finish_reason": True,
    }
    whole = json.loads(post(llmapi_server, "tensorrt_llm", dict(body, streaming=False), "generate"))
    streamed = events(post(llmapi_server, "tensorrt_llm", dict(body, streaming=True), "generate_stream"))
    # the streamed text is cumulative (CompletionOutput.text): the last response holds the whole output
    assert streamed[-1]["text_output"] == whole["text_output"]
    texts = [e["text_output"] for e in streamed]
    assert all(texts[i + 1].startswith(texts[i].rstrip("\ufffd")) for i in range(len(texts) - 1))
    # no speculation: one token per step, so a request that ran to max_tokens decoded MAX_TOKENS steps
    assert flat(whole["finish_reason"]) == ["length"], "the prompt ended early: choose one that runs to max_tokens"
    assert flat(streamed[-1]["finish_reason"]) == ["length"]
    assert len(streamed) == responses_for(MAX_TOKENS, INTERVAL)
