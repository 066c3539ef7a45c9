"""The CPU flavour of every method, served by the real tritonserver (nvidia-pytriton's).

One server per method (module-scoped, parametrized), a few short requests each:
- `/v2/models/ensemble/generate` and `/v2/models/tensorrt_llm_bls/generate` answer, and greedy output equals
  Hugging Face `generate` on the same target checkpoint (an independent implementation), token for token;
- streams (HTTP generate_stream and the gRPC stream) concatenate to exactly the non-streamed text and ids;
- acceptance counters come back with return_perf_metrics; bad requests get errors and the server stays healthy;
- a request batch of 2 through the BLS, and concurrent requests through the ensemble (in-flight batching).
Checkpoints: the shipped checkpoints/tiny when present, else random-init ones built here (seconds).
"""

from __future__ import annotations

import json
import queue
import threading
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from repo_helpers import ROOT
from tiny_models import build_tiny_checkpoints

from specbuild.plan import Layout
from specbuild.recipe.schema import Recipe

pytestmark = pytest.mark.timeout(900)

PROMPTS = ["def add(a, b):", "The quick brown fox"]
MAX_TOKENS = 10
# streaming: false for "none" covers the non-decoupled core, BLS and ensemble; the others are decoupled.
METHODS = {
    "none": ({"method": "none"}, False),
    "medusa": ({"method": "medusa", "checkpoint": "{medusa}", "num_heads": 3, "num_layers": 1, "max_draft_len": 8,
                "choices": [[0], [1], [0, 0], [0, 1], [0, 0, 0]]}, True),
    "eagle": ({"method": "eagle", "checkpoint": "{eagle}", "num_eagle_layers": 3, "max_draft_len": 8,
               "max_non_leaves_per_layer": 2, "choices": [[0], [1], [0, 0], [0, 1], [0, 0, 0]]}, True),
    "draft_target": ({"method": "draft_target", "checkpoint": "{draft}", "num_draft_tokens": 3}, True),
    "prompt_lookup": ({"method": "prompt_lookup", "max_draft_len": 3, "max_matching_ngram_size": 2}, True),
    "lookahead": ({"method": "lookahead", "window_size": 2, "ngram_size": 2, "verification_set_size": 1}, True),
}


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    import torch

    torch.set_num_threads(1)
    shipped = ROOT / "checkpoints" / "tiny"
    if all((shipped / name / "config.json").is_file() for name in ("target", "draft", "medusa", "eagle")):
        return {name: shipped / name for name in ("target", "draft", "medusa", "eagle")}
    return build_tiny_checkpoints(tmp_path_factory.mktemp("tiny"))


def make_recipe(method: str, checkpoints: dict[str, Path]) -> Recipe:
    spec, streaming = METHODS[method]
    spec = {k: (v.format(**{n: str(p) for n, p in checkpoints.items()}) if isinstance(v, str) else v)
            for k, v in spec.items()}
    if method == "medusa":  # as many heads as the checkpoint has (the shipped tiny one has 4)
        spec["num_heads"] = json.loads((checkpoints["medusa"] / "config.json").read_text())["medusa_num_heads"]
    recipe = Recipe.model_validate({
        "name": f"served-{method}", "runtime": "reference",
        "model": {"checkpoint": str(checkpoints["target"]), "dtype": "float32"},
        "speculation": spec,
        "build": {"max_batch_size": 4, "max_input_len": 64, "max_seq_len": 128},
        "triton": {"streaming": streaming},
        "validation": {"require_lossless": False},
    })
    from specbuild.recipe.loader import file_findings, general_findings

    assert list(general_findings(recipe)) == [] and list(file_findings(recipe)) == []
    return recipe


class Served:
    def __init__(self, method, recipe, server):
        self.method, self.recipe, self.server = method, recipe, server

    def post(self, model: str, body: dict, endpoint: str = "generate"):
        req = urllib.request.Request(f"{self.server.http_url}/v2/models/{model}/{endpoint}",
                                     data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=120) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def generate(self, model: str, prompt: str, **extra) -> dict:
        status, text = self.post(model, {"text_input": prompt, "max_tokens": MAX_TOKENS,
                                         "exclude_input_in_output": True, **extra})
        assert status == 200, text
        body = json.loads(text)
        assert "error" not in body, body
        return body

    def stream(self, model: str, prompt: str, **extra) -> list[dict]:
        status, text = self.post(model, {"text_input": prompt, "max_tokens": MAX_TOKENS,
                                         "exclude_input_in_output": True, **extra}, "generate_stream")
        assert status == 200, text
        events = [json.loads(line[len("data: "):]) for line in text.splitlines() if line.startswith("data: ")]
        assert events and not any("error" in e for e in events), events
        return events


@pytest.fixture(scope="module", params=list(METHODS))
def served(request, checkpoints, tmp_path_factory):
    from specbuild.compile import build_engines
    from specbuild.serve.tritonserver import TritonServer
    from specbuild.triton.repository import write_repository

    method = request.param
    recipe = make_recipe(method, checkpoints)
    root = tmp_path_factory.mktemp(f"served-{method}")
    layout = Layout(root / "engines", root / "triton_repo", root / "reports", recipe.name)
    build_engines(recipe, layout)
    repo = write_repository(recipe, layout)
    with TritonServer(repo, log_path=root / "tritonserver.log") as server:
        yield Served(method, recipe, server)


def ids_of(body) -> list[int]:
    value = body.get("output_ids", [])
    return [value] if isinstance(value, int) else list(value)


@pytest.fixture(scope="module")
def hf_greedy(checkpoints):
    """Greedy continuations by Hugging Face transformers on the target checkpoint (end id excluded)."""
    import torch
    from transformers import AutoTokenizer, LlamaForCausalLM

    tok = AutoTokenizer.from_pretrained(checkpoints["target"])
    model = LlamaForCausalLM.from_pretrained(checkpoints["target"], dtype=torch.float32).eval()
    out = {}
    for prompt in PROMPTS:
        ids = tok(prompt, return_tensors="pt").input_ids
        with torch.no_grad():
            gen = model.generate(ids, max_new_tokens=MAX_TOKENS, do_sample=False, eos_token_id=tok.eos_token_id,
                                 pad_token_id=tok.pad_token_id)
        new = gen[0, ids.shape[1]:].tolist()
        out[prompt] = new[:new.index(tok.eos_token_id)] if tok.eos_token_id in new else new
    return out


def test_ensemble_and_bls_generate_the_targets_greedy_tokens(served, hf_greedy):
    for prompt in PROMPTS:
        for model in ("ensemble", "tensorrt_llm_bls"):
            body = served.generate(model, prompt)
            assert isinstance(body["text_output"], str)
            assert ids_of(body) == hf_greedy[prompt], (served.method, model, prompt)
            assert len(ids_of(body)) <= MAX_TOKENS


def test_input_is_included_when_asked(served):
    body = served.generate("tensorrt_llm_bls", PROMPTS[0], exclude_input_in_output=False)
    assert body["text_output"].startswith(PROMPTS[0])
    plain = served.generate("tensorrt_llm_bls", PROMPTS[0])
    assert body["text_output"] == PROMPTS[0] + plain["text_output"]


def test_http_streams_concatenate_to_the_whole(served):
    whole = served.generate("tensorrt_llm_bls", PROMPTS[0])
    events = served.stream("tensorrt_llm_bls", PROMPTS[0], stream=served.recipe.triton.streaming)
    assert "".join(e["text_output"] for e in events) == whole["text_output"]
    assert sum((ids_of(e) for e in events), []) == ids_of(whole)
    if served.recipe.triton.streaming and len(ids_of(whole)) > 4:
        assert len(events) > 1  # really streamed
    # the ensemble streams when tensorrt_llm is decoupled (not for draft-target/prompt lookup: their cores
    # answer the BLS once per round)
    ensemble_streams = served.recipe.triton.streaming and served.method not in ("draft_target", "prompt_lookup")
    whole = served.generate("ensemble", PROMPTS[1])
    events = served.stream("ensemble", PROMPTS[1], stream=ensemble_streams)
    assert "".join(e["text_output"] for e in events) == whole["text_output"]
    assert sum((ids_of(e) for e in events), []) == ids_of(whole)


def test_grpc_stream_concatenates_to_the_whole(served):
    import tritonclient.grpc as grpcclient

    whole = served.generate("tensorrt_llm_bls", PROMPTS[1])
    streaming = served.recipe.triton.streaming
    results: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(served.server.grpc_url)
    try:
        client.start_stream(callback=lambda result, error: results.put((result, error)))
        inputs = [_grpc_input("text_input", np.array([[PROMPTS[1].encode()]], dtype=object), "BYTES"),
                  _grpc_input("max_tokens", np.array([[MAX_TOKENS]], dtype=np.int32), "INT32"),
                  _grpc_input("stream", np.array([[streaming]], dtype=bool), "BOOL"),
                  _grpc_input("exclude_input_in_output", np.array([[True]], dtype=bool), "BOOL")]
        client.async_stream_infer("tensorrt_llm_bls", inputs, enable_empty_final_response=True)
        texts, ids = [], []
        while True:
            result, error = results.get(timeout=120)
            assert error is None, error
            response = result.get_response()
            text = result.as_numpy("text_output")
            if text is not None:
                texts.append(text.reshape(-1)[0].decode())
                ids += result.as_numpy("output_ids").reshape(-1).tolist()
            if response.parameters["triton_final_response"].bool_param:
                break
    finally:
        client.stop_stream()
        client.close()
    assert "".join(texts) == whole["text_output"]
    assert ids == ids_of(whole)


def _grpc_input(name, array, dtype):
    import tritonclient.grpc as grpcclient

    t = grpcclient.InferInput(name, list(array.shape), dtype)
    t.set_data_from_numpy(array)
    return t


def test_acceptance_counters(served):
    body = served.generate("tensorrt_llm_bls", PROMPTS[0], return_perf_metrics=True)
    drafted, accepted = body["total_draft_tokens"], body["total_accepted_draft_tokens"]
    assert 0 <= accepted <= drafted
    assert body["acceptance_rate"] == pytest.approx(accepted / drafted if drafted else 0.0, abs=1e-6)
    assert body["first_token_time_ns"] >= body["arrival_time_ns"] > 0
    if served.method == "none":
        assert drafted == 0
    elif served.method != "prompt_lookup":  # prompt lookup drafts only where an n-gram repeats
        assert drafted > 0
    ensemble = served.generate("ensemble", PROMPTS[0], return_perf_metrics=True)
    assert "total_draft_tokens" in ensemble and "acceptance_rate" in ensemble


def test_bad_requests_get_errors_and_the_server_stays_healthy(served):
    for model in ("ensemble", "tensorrt_llm_bls"):
        for body, words in (({"text_input": "", "max_tokens": 4}, "empty"),
                            ({"text_input": "hi", "max_tokens": 0}, "max_tokens"),
                            ({"text_input": "hi", "max_tokens": 100000}, "max_seq_len"),
                            ({"text_input": "hi " * 200, "max_tokens": 4}, "max_input_len")):
            status, text = served.post(model, body)
            assert ("error" in text and words in text), (model, body, status, text)
    assert served.server.model_ready("tensorrt_llm") and served.server.model_ready("ensemble")
    served.generate("ensemble", PROMPTS[0])


def test_request_batch_and_concurrent_requests(served, hf_greedy):
    import tritonclient.http as httpclient

    expected = [hf_greedy[p] for p in PROMPTS]
    # concurrent single requests through the ensemble (joined in flight by the executor when decoupled)
    answers: dict[int, list[int]] = {}

    def ask(i):
        answers[i] = ids_of(served.generate("ensemble", PROMPTS[i % 2]))

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [answers[i] for i in range(4)] == [expected[i % 2] for i in range(4)]
    if served.recipe.triton.streaming:
        return  # a decoupled BLS answers a batch with one response per row: checked through gRPC elsewhere
    client = httpclient.InferenceServerClient(served.server.http_address)
    inputs = []
    for name, array, dtype in (("text_input", np.array([[p.encode()] for p in PROMPTS], dtype=object), "BYTES"),
                               ("max_tokens", np.array([[MAX_TOKENS]] * 2, dtype=np.int32), "INT32"),
                               ("exclude_input_in_output", np.array([[True]] * 2, dtype=bool), "BOOL")):
        t = httpclient.InferInput(name, list(array.shape), dtype)
        t.set_data_from_numpy(array)
        inputs.append(t)
    result = client.infer("tensorrt_llm_bls", inputs)
    ids = result.as_numpy("output_ids")
    assert ids.shape[0] == 2
    for row, want in enumerate(expected):
        got = [int(t) for t in ids[row].reshape(-1) if t != -1]
        assert got == want


def _stream_client(served):
    import tritonclient.grpc as grpcclient

    results: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(served.server.grpc_url)
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    return client, results


def _core_inputs(prompt_ids, max_tokens, streaming=True):
    return [_grpc_input("input_ids", np.array([prompt_ids], dtype=np.int32), "INT32"),
            _grpc_input("input_lengths", np.array([[len(prompt_ids)]], dtype=np.int32), "INT32"),
            _grpc_input("request_output_len", np.array([[max_tokens]], dtype=np.int32), "INT32"),
            _grpc_input("streaming", np.array([[streaming]], dtype=bool), "BOOL")]


def test_stop_request_and_cancel_end_a_running_stream(served):
    """`stop: true` with the request id of a running request ends it early; a cancelled stream leaves the
    server healthy. Needs a decoupled tensorrt_llm (streaming recipes, not the BLS-driven methods)."""
    if not served.recipe.triton.streaming or served.method in ("draft_target", "prompt_lookup"):
        pytest.skip("tensorrt_llm is not decoupled in this deployment")
    prompt_ids = [1, 5, 6, 7]
    longest = served.recipe.build.max_seq_len - len(prompt_ids)
    client, results = _stream_client(served)
    try:
        # the same request left alone: how many tokens it makes
        client.async_stream_infer("tensorrt_llm", _core_inputs(prompt_ids, longest), request_id="full",
                                  enable_empty_final_response=True)
        full = 0
        while True:
            result, error = results.get(timeout=120)
            assert error is None, error.message()
            ids = result.as_numpy("output_ids")
            full += 0 if ids is None else ids.size
            if result.get_response().parameters["triton_final_response"].bool_param:
                break
        client.async_stream_infer("tensorrt_llm", _core_inputs(prompt_ids, longest), request_id="long-1",
                                  enable_empty_final_response=True)
        result, error = results.get(timeout=120)
        assert error is None, error
        # Triton still wants the two required inputs; the model looks only at `stop` and the request id
        stop = [_grpc_input("stop", np.array([[True]]), "BOOL"),
                _grpc_input("input_lengths", np.array([[1]], dtype=np.int32), "INT32"),
                _grpc_input("request_output_len", np.array([[1]], dtype=np.int32), "INT32")]
        client.async_stream_infer("tensorrt_llm", stop, request_id="long-1", enable_empty_final_response=True)
        tokens, finals = result.as_numpy("output_ids").reshape(-1).tolist(), 0
        while finals < 2:  # the long request's final response and the stop request's
            result, error = results.get(timeout=120)
            assert error is None, error.message()
            ids = result.as_numpy("output_ids")
            if ids is not None:
                tokens += ids.reshape(-1).tolist()
            finals += result.get_response().parameters["triton_final_response"].bool_param
        assert 0 < len(tokens) < full
    finally:
        client.stop_stream()
        client.close()
    # a stream cancelled by the client mid-way
    client, results = _stream_client(served)
    client.async_stream_infer("tensorrt_llm", _core_inputs(prompt_ids, longest), request_id="long-2")
    results.get(timeout=120)
    client.stop_stream(cancel_requests=True)
    client.close()
    assert served.server.model_ready("tensorrt_llm")
    served.generate("ensemble", PROMPTS[0])


def test_decoupled_bls_answers_a_request_batch_row_by_row(served, hf_greedy):
    if not served.recipe.triton.streaming:
        pytest.skip("the non-decoupled BLS is checked with a batch in test_request_batch_and_concurrent_requests")
    client, results = _stream_client(served)
    try:
        inputs = [_grpc_input("text_input", np.array([[p.encode()] for p in PROMPTS], dtype=object), "BYTES"),
                  _grpc_input("max_tokens", np.array([[MAX_TOKENS]] * 2, dtype=np.int32), "INT32"),
                  _grpc_input("exclude_input_in_output", np.array([[True]] * 2, dtype=bool), "BOOL")]
        client.async_stream_infer("tensorrt_llm_bls", inputs, enable_empty_final_response=True)
        rows = {}
        while True:
            result, error = results.get(timeout=120)
            assert error is None, error
            if result.as_numpy("output_ids") is not None:
                rows[int(result.as_numpy("batch_index").reshape(-1)[0])] = result.as_numpy("output_ids").reshape(-1).tolist()
            if result.get_response().parameters["triton_final_response"].bool_param:
                break
    finally:
        client.stop_stream()
        client.close()
    assert rows == {0: hf_greedy[PROMPTS[0]], 1: hf_greedy[PROMPTS[1]]}
