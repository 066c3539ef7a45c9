"""The CPU flavour of every method, served by the real tritonserver (nvidia-pytriton's).

One server per method (module-scoped, parametrized), a few short requests each:
- `/v2/models/ensemble/generate` and `/v2/models/tensorrt_llm_bls/generate` answer, and greedy output equals
  Hugging Face `generate` on the same target checkpoint (an independent implementation), token for token;
- streams (HTTP generate_stream and the gRPC stream) concatenate to exactly the non-streamed text and ids;
- acceptance counters come back with return_perf_metrics; bad requests get errors and the server stays healthy;
- a request batch of 2 through the BLS, and concurrent requests through the ensemble (in-flight batching);
- last, on the same servers, the validation suite end to end (small prompt set, short sweeps) against one
  baseline server shared by every method (the target without speculation is the same for every method): it
  lived in tests/validate/test_suite_reference.py, which started a second server per method for it.
Checkpoints: the shipped checkpoints/tiny when present, else random-init ones built here (seconds).
"""

from __future__ import annotations

import json
import queue
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from repo_helpers import ROOT
from tiny_models import build_tiny_checkpoints

from specbuild.methods import describe
from specbuild.plan import Layout
from specbuild.recipe.schema import Recipe
from specbuild.runtimes import runtime_for
from specbuild.runtimes.build import resolve_build

pytestmark = pytest.mark.timeout(900)

PROMPTS = ["def add(a, b):", "The quick brown fox"]
MAX_TOKENS = 10
# streaming: false for "none" covers the non-decoupled core, BLS and ensemble; the others are decoupled.
METHODS = {
    "none": ({"method": "none"}, False),
    "medusa": (
        {
            "method": "medusa",
            "checkpoint": "{medusa}",
            "num_heads": 3,
            "num_layers": 1,
            "max_draft_len": 8,
            "choices": [[0], [1], [0, 0], [0, 1], [0, 0, 0]],
        },
        True,
    ),
    "eagle": (
        {
            "method": "eagle",
            "checkpoint": "{eagle}",
            "num_eagle_layers": 3,
            "max_draft_len": 8,
            "max_non_leaves_per_layer": 2,
            "choices": [[0], [1], [0, 0], [0, 1], [0, 0, 0]],
        },
        True,
    ),
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


def make_recipe(method: str, checkpoints: dict[str, Path], validation: dict | None = None) -> Recipe:
    spec, streaming = METHODS[method]
    spec = {
        k: (v.format(**{n: str(p) for n, p in checkpoints.items()}) if isinstance(v, str) else v)
        for k, v in spec.items()
    }
    if method == "medusa":  # as many heads as the checkpoint has (the shipped tiny one has 4)
        spec["num_heads"] = json.loads((checkpoints["medusa"] / "config.json").read_text())["medusa_num_heads"]
    recipe = Recipe.model_validate(
        {
            "name": f"served-{method}",
            "runtime": "reference",
            "model": {"checkpoint": str(checkpoints["target"]), "dtype": "float32"},
            "speculation": spec,
            "build": {"max_batch_size": 4, "max_input_len": 64, "max_seq_len": 128},
            "triton": {"streaming": streaming},
            "validation": validation or {"require_lossless": False},
        }
    )
    from specbuild.recipe.loader import file_findings, general_findings

    if validation is None:  # the served recipes (the suite's min_acceptance_length gate is a finding for none)
        assert list(general_findings(resolve_build(recipe))) == [] and list(file_findings(resolve_build(recipe))) == []
    return recipe


class Served:
    def __init__(self, method, recipe, server):
        self.method, self.recipe, self.server = method, recipe, server

    def post(self, model: str, body: dict, endpoint: str = "generate"):
        req = urllib.request.Request(
            f"{self.server.http_url}/v2/models/{model}/{endpoint}",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(req, timeout=120) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def generate(self, model: str, prompt: str, **extra) -> dict:
        status, text = self.post(
            model, {"text_input": prompt, "max_tokens": MAX_TOKENS, "exclude_input_in_output": True, **extra}
        )
        assert status == 200, text
        body = json.loads(text)
        assert "error" not in body, body
        return body

    def stream(self, model: str, prompt: str, **extra) -> list[dict]:
        status, text = self.post(
            model,
            {"text_input": prompt, "max_tokens": MAX_TOKENS, "exclude_input_in_output": True, **extra},
            "generate_stream",
        )
        assert status == 200, text
        events = [json.loads(line[len("data: ") :]) for line in text.splitlines() if line.startswith("data: ")]
        assert events and not any("error" in e for e in events), events
        return events


@pytest.fixture(scope="module", params=list(METHODS))
def served(request, checkpoints, tmp_path_factory):
    from specbuild.compile import build_engines
    from specbuild.serve import TritonServer
    from specbuild.repository.engine.writer import write_repository

    method = request.param
    recipe = make_recipe(method, checkpoints)
    root = tmp_path_factory.mktemp(f"served-{method}")
    layout = Layout(root / "engines", root / "triton_repo", root / "reports", recipe.name)
    build_engines(resolve_build(recipe), layout)
    repo = write_repository(recipe, describe(recipe), layout, flavour=runtime_for(recipe))
    with TritonServer(repo, log_path=root / "tritonserver.log", exit_timeout_s=1) as server:
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
            gen = model.generate(
                ids,
                max_new_tokens=MAX_TOKENS,
                do_sample=False,
                eos_token_id=tok.eos_token_id,
                pad_token_id=tok.pad_token_id,
            )
        new = gen[0, ids.shape[1] :].tolist()
        out[prompt] = new[: new.index(tok.eos_token_id)] if tok.eos_token_id in new else new
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
        inputs = [
            _grpc_input("text_input", np.array([[PROMPTS[1].encode()]], dtype=object), "BYTES"),
            _grpc_input("max_tokens", np.array([[MAX_TOKENS]], dtype=np.int32), "INT32"),
            _grpc_input("stream", np.array([[streaming]], dtype=bool), "BOOL"),
            _grpc_input("exclude_input_in_output", np.array([[True]], dtype=bool), "BOOL"),
        ]
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
        for body, words in (
            ({"text_input": "", "max_tokens": 4}, "empty"),
            ({"text_input": "hi", "max_tokens": 0}, "max_tokens"),
            ({"text_input": "hi", "max_tokens": 100000}, "max_seq_len"),
            ({"text_input": "hi " * 200, "max_tokens": 4}, "max_input_len"),
        ):
            status, text = served.post(model, body)
            assert "error" in text and words in text, (model, body, status, text)
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
    for name, array, dtype in (
        ("text_input", np.array([[p.encode()] for p in PROMPTS], dtype=object), "BYTES"),
        ("max_tokens", np.array([[MAX_TOKENS]] * 2, dtype=np.int32), "INT32"),
        ("exclude_input_in_output", np.array([[True]] * 2, dtype=bool), "BOOL"),
    ):
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
    return [
        _grpc_input("input_ids", np.array([prompt_ids], dtype=np.int32), "INT32"),
        _grpc_input("input_lengths", np.array([[len(prompt_ids)]], dtype=np.int32), "INT32"),
        _grpc_input("request_output_len", np.array([[max_tokens]], dtype=np.int32), "INT32"),
        _grpc_input("streaming", np.array([[streaming]], dtype=bool), "BOOL"),
    ]


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
        client.async_stream_infer(
            "tensorrt_llm", _core_inputs(prompt_ids, longest), request_id="full", enable_empty_final_response=True
        )
        full = 0
        while True:
            result, error = results.get(timeout=120)
            assert error is None, error.message()
            ids = result.as_numpy("output_ids")
            full += 0 if ids is None else ids.size
            if result.get_response().parameters["triton_final_response"].bool_param:
                break
        # a busy machine may deliver the whole stream before the stop arrives: that attempt proves nothing, so
        # it is tried again (a server that ignores the stop fails every attempt)
        for attempt in range(3):
            rid = f"long-1-{attempt}"
            client.async_stream_infer(
                "tensorrt_llm", _core_inputs(prompt_ids, longest), request_id=rid, enable_empty_final_response=True
            )
            result, error = results.get(timeout=120)
            assert error is None, error
            # Triton still wants the two required inputs; the model looks only at `stop` and the request id
            stop = [
                _grpc_input("stop", np.array([[True]]), "BOOL"),
                _grpc_input("input_lengths", np.array([[1]], dtype=np.int32), "INT32"),
                _grpc_input("request_output_len", np.array([[1]], dtype=np.int32), "INT32"),
            ]
            client.async_stream_infer("tensorrt_llm", stop, request_id=rid, enable_empty_final_response=True)
            tokens, finals = result.as_numpy("output_ids").reshape(-1).tolist(), 0
            while finals < 2:  # the long request's final response and the stop request's
                result, error = results.get(timeout=120)
                assert error is None, error.message()
                ids = result.as_numpy("output_ids")
                if ids is not None:
                    tokens += ids.reshape(-1).tolist()
                finals += result.get_response().parameters["triton_final_response"].bool_param
            if len(tokens) < full:
                break
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
        inputs = [
            _grpc_input("text_input", np.array([[p.encode()] for p in PROMPTS], dtype=object), "BYTES"),
            _grpc_input("max_tokens", np.array([[MAX_TOKENS]] * 2, dtype=np.int32), "INT32"),
            _grpc_input("exclude_input_in_output", np.array([[True]] * 2, dtype=bool), "BOOL"),
        ]
        client.async_stream_infer("tensorrt_llm_bls", inputs, enable_empty_final_response=True)
        rows = {}
        while True:
            result, error = results.get(timeout=120)
            assert error is None, error
            if result.as_numpy("output_ids") is not None:
                rows[int(result.as_numpy("batch_index").reshape(-1)[0])] = (
                    result.as_numpy("output_ids").reshape(-1).tolist()
                )
            if result.get_response().parameters["triton_final_response"].bool_param:
                break
    finally:
        client.stop_stream()
        client.close()
    assert rows == {0: hf_greedy[PROMPTS[0]], 1: hf_greedy[PROMPTS[1]]}


# --- NVIDIA's client contract -----------------------------------------------------------------------------------
# Requests shaped the way tensorrtllm_backend's client scripts send them (inflight_batcher_llm/client/
# end_to_end_grpc_client.py, inflight_batcher_llm_client.py; written here from their documented contract), so
# that those flows work unchanged against a specbuild repository.


def _grpc_stream(served, model, inputs, request_id="nv"):
    """Send one request on a gRPC stream (as the NVIDIA clients do, decoupled or not); returns the results
    (errors raised as AssertionError with the server's message)."""
    client, results = _stream_client(served)
    out = []
    try:
        client.async_stream_infer(model, inputs, request_id=request_id, enable_empty_final_response=True)
        while True:
            result, error = results.get(timeout=120)
            if error is not None:
                raise AssertionError(error.message())
            out.append(result)
            if result.get_response().parameters["triton_final_response"].bool_param:
                return out
    finally:
        client.stop_stream()
        client.close()


def _grpc_error(served, model, inputs) -> str:
    try:
        _grpc_stream(served, model, inputs)
    except AssertionError as e:
        return str(e)
    raise AssertionError(f"{model} answered a request that must be refused")


def _e2e_client_inputs(prompt, output_len, streaming, **extra):
    """end_to_end_grpc_client.py prepare_inputs: [[value]] arrays, temperature 1.0, beam_width 1,
    num_return_sequences 1, return_* flags [[False]], exclude_input_in_output False."""
    arrays = {
        "text_input": (np.array([[prompt]]).astype(object), "BYTES"),
        "max_tokens": (np.ones_like([[prompt]]).astype(np.int32) * output_len, "INT32"),
        "stream": (np.array([[streaming]], dtype=bool), "BOOL"),
        "beam_width": (np.array([[1]], dtype=np.int32), "INT32"),
        "temperature": (np.array([[1.0]], dtype=np.float32), "FP32"),
        "num_return_sequences": (np.array([[1]], dtype=np.int32), "INT32"),
        "return_log_probs": (np.array([[False]]), "BOOL"),
        "return_context_logits": (np.array([[False]]), "BOOL"),
        "return_generation_logits": (np.array([[False]]), "BOOL"),
        "exclude_input_in_output": (np.array([[False]]), "BOOL"),
    }
    arrays.update(extra)
    return [_grpc_input(name, array, dtype) for name, (array, dtype) in arrays.items()]


def _client_text(results, streaming) -> str:
    """The client's parse: text_output[0].decode() per response, concatenated when streaming."""
    texts = [r.as_numpy("text_output")[0].decode("utf-8") for r in results if r.as_numpy("text_output") is not None]
    return "".join(texts) if streaming else texts[-1]


def _streams_through(served, model) -> bool:
    bls_driven = served.method in ("draft_target", "prompt_lookup")
    return served.recipe.triton.streaming and (model == "tensorrt_llm_bls" or not bls_driven)


def test_end_to_end_client_flows_decode_text_output_0(served, hf_greedy):
    """end_to_end_grpc_client.py against the ensemble and the BLS: text_output is rank 1, so
    text_output[0].decode() is the text; exclude_input_in_output false returns the prompt first."""
    prompt = PROMPTS[0]
    plain = served.generate("tensorrt_llm_bls", prompt)["text_output"]
    for model in ("ensemble", "tensorrt_llm_bls"):
        for streaming in {False, _streams_through(served, model)}:
            results = _grpc_stream(served, model, _e2e_client_inputs(prompt, MAX_TOKENS, streaming))
            first = results[0].as_numpy("text_output")
            assert first.ndim == 1, (model, first.shape)
            if streaming:  # streamed chunks hold only new text
                assert _client_text(results, True) == plain, model
            else:
                assert _client_text(results, False) == prompt + plain, model


def test_upstream_optional_inputs_are_refused_in_one_sentence(served):
    """Inputs of upstream's contract the reference runtime does not implement reach the model (no Triton
    'unexpected inference input') and get one sentence naming them."""
    prompt = PROMPTS[1]
    cases = {
        "lora_task_id": {"lora_task_id": (np.array([[7]], dtype=np.uint64), "UINT64")},
        "lora_weights": {
            "lora_weights": (np.zeros([1, 2, 8], dtype=np.float16), "FP16"),
            "lora_config": (np.zeros([1, 2, 3], dtype=np.int32), "INT32"),
        },
        "guided_decoding_guide_type": {
            "guided_decoding_guide_type": (np.array([[b"json"]], dtype=object), "BYTES"),
            "guided_decoding_guide": (np.array([[b"{}"]], dtype=object), "BYTES"),
        },
        "prompt_embedding_table": {
            "prompt_embedding_table": (np.zeros([1, 2, 4], dtype=np.float16), "FP16"),
            "prompt_vocab_size": (np.array([[2]], dtype=np.int32), "INT32"),
        },
        "prompt_table_extra_id": {"prompt_table_extra_id": (np.array([[1]], dtype=np.uint64), "UINT64")},
    }
    for model in ("ensemble", "tensorrt_llm_bls"):
        for name, extra in cases.items():
            if model == "ensemble" and name == "prompt_table_extra_id":
                name = "prompt_table_extra_ids"  # the core's name for preprocessing's OUT_PROMPT_TABLE_EXTRA_IDS
            message = _grpc_error(served, model, _e2e_client_inputs(prompt, 4, False, **extra))
            assert "unexpected inference input" not in message, (model, message)
            assert "not supported" in message and name.split("_")[0] in message, (model, name, message)
        images = {"image_bytes_input": (np.zeros([1, 1, 2, 2, 3], dtype=np.uint8), "UINT8")}
        if model == "tensorrt_llm_bls":
            message = _grpc_error(served, model, _e2e_client_inputs(prompt, 4, False, **images))
            assert "image_bytes_input" in message and "multimodal" in message, message
    # decoder_text_input is accepted and, for a decoder-only model, changes nothing (the C++ backend reads
    # decoder_input_ids for encoder-decoder models only)
    extra = {"decoder_text_input": (np.array([[b"ignored"]], dtype=object), "BYTES")}
    results = _grpc_stream(served, "ensemble", _e2e_client_inputs(prompt, MAX_TOKENS, False, **extra))
    assert _client_text(results, False) == prompt + served.generate("ensemble", prompt)["text_output"]


def _infer(served, model, inputs, outputs):
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(served.server.grpc_url)
    try:
        return client.infer(model, inputs, outputs=[grpcclient.InferRequestedOutput(n) for n in outputs])
    finally:
        client.close()


def test_preprocessing_core_postprocessing_chain_by_hand(served, hf_greedy):
    """The ensemble's three steps called one by one, passing upstream's tensors along (DECODER_INPUT_ID /
    REQUEST_DECODER_INPUT_LEN included: pad ids for a decoder-only model)."""
    if served.method not in ("none", "medusa"):
        pytest.skip("one plain and one decoupled core are enough")
    prompt = PROMPTS[0]
    pre = _infer(
        served,
        "preprocessing",
        [
            _grpc_input("QUERY", np.array([[prompt.encode()]], dtype=object), "BYTES"),
            _grpc_input("REQUEST_OUTPUT_LEN", np.array([[MAX_TOKENS]], dtype=np.int32), "INT32"),
        ],
        [
            "INPUT_ID",
            "REQUEST_INPUT_LEN",
            "DECODER_INPUT_ID",
            "REQUEST_DECODER_INPUT_LEN",
            "OUT_END_ID",
            "OUT_PAD_ID",
            "BAD_WORDS_IDS",
            "STOP_WORDS_IDS",
            "REQUEST_OUTPUT_LEN",
        ],
    )
    pad = int(pre.as_numpy("OUT_PAD_ID")[0][0])
    assert pre.as_numpy("DECODER_INPUT_ID").tolist() == [[pad]]
    assert pre.as_numpy("REQUEST_DECODER_INPUT_LEN").tolist() == [[1]]
    core_inputs = [
        _grpc_input("input_ids", pre.as_numpy("INPUT_ID"), "INT32"),
        _grpc_input("input_lengths", pre.as_numpy("REQUEST_INPUT_LEN"), "INT32"),
        _grpc_input("decoder_input_ids", pre.as_numpy("DECODER_INPUT_ID"), "INT32"),
        _grpc_input("decoder_input_lengths", pre.as_numpy("REQUEST_DECODER_INPUT_LEN"), "INT32"),
        _grpc_input("request_output_len", pre.as_numpy("REQUEST_OUTPUT_LEN"), "INT32"),
        _grpc_input("end_id", pre.as_numpy("OUT_END_ID"), "INT32"),
        _grpc_input("pad_id", pre.as_numpy("OUT_PAD_ID"), "INT32"),
        _grpc_input("exclude_input_in_output", np.array([[True]]), "BOOL"),
    ]
    results = _grpc_stream(served, "tensorrt_llm", core_inputs)
    tokens = [r.as_numpy("output_ids") for r in results if r.as_numpy("output_ids") is not None]
    assert len(tokens) == 1 and tokens[0].ndim == 3  # [batch, beams, tokens]
    lengths = [r.as_numpy("sequence_length") for r in results if r.as_numpy("sequence_length") is not None][0]
    assert tokens[0][0][0][: lengths[0][0]].tolist() == hf_greedy[prompt]
    post = _infer(
        served,
        "postprocessing",
        [_grpc_input("TOKENS_BATCH", tokens[0], "INT32"), _grpc_input("SEQUENCE_LENGTH", lengths, "INT32")],
        ["OUTPUT"],
    )
    assert post.as_numpy("OUTPUT").shape == (1,)
    assert post.as_numpy("OUTPUT")[0].decode() == served.generate("ensemble", prompt)["text_output"]


def test_inflight_batcher_client_requests_reach_the_core(served, hf_greedy):
    """inflight_batcher_llm_client.py's request to tensorrt_llm: runtime_top_k 1, runtime_top_p 0.0 (unset, as
    the C++ backend reads it), temperature 1.0, beam_width 1; output_ids[0][0], sequence_length[0][0]."""
    if served.method not in ("none", "eagle"):
        pytest.skip("one plain and one speculative engine are enough")
    prompt = PROMPTS[1]
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(served.recipe.tokenizer_dir)
    input_ids = np.array([tok.encode(prompt)], dtype=np.int32)
    streaming = served.recipe.triton.streaming
    inputs = [
        _grpc_input("input_ids", input_ids, "INT32"),
        _grpc_input("input_lengths", np.array([[input_ids.shape[1]]], dtype=np.int32), "INT32"),
        _grpc_input("request_output_len", np.array([[MAX_TOKENS]], dtype=np.int32), "INT32"),
        _grpc_input("beam_width", np.array([[1]], dtype=np.int32), "INT32"),
        _grpc_input("temperature", np.array([[1.0]], dtype=np.float32), "FP32"),
        _grpc_input("streaming", np.array([[streaming]], dtype=bool), "BOOL"),
        _grpc_input("end_id", np.array([[tok.eos_token_id]], dtype=np.int32), "INT32"),
        _grpc_input("pad_id", np.array([[tok.pad_token_id]], dtype=np.int32), "INT32"),
        _grpc_input("runtime_top_k", np.array([[1]], dtype=np.int32), "INT32"),
        _grpc_input("runtime_top_p", np.array([[0.0]], dtype=np.float32), "FP32"),
        _grpc_input("exclude_input_in_output", np.array([[True]]), "BOOL"),
    ]
    tokens = []
    for result in _grpc_stream(served, "tensorrt_llm", inputs):
        output_ids = result.as_numpy("output_ids")
        if output_ids is not None and result.as_numpy("sequence_length")[0][0] > 0:
            tokens += list(output_ids[0][0])
    assert tokens == hf_greedy[prompt]


def test_sampling_values_are_checked_where_they_enter(served):
    """temperature finite and >= 0, top_p in (0, 1] (0: unset), top_k >= 0, max_tokens required and positive:
    refused with a sentence naming the value, at the ensemble (checked by the core), the BLS and the core."""
    if served.method not in ("none", "eagle", "draft_target"):
        pytest.skip("the checks are the same for every method")
    prompt = PROMPTS[0]
    bad = {"temperature": [-1.0, float("nan"), float("inf")], "top_p": [2.0, -0.5], "top_k": [-1]}
    for model in ("ensemble", "tensorrt_llm_bls"):
        for name, values in bad.items():
            for value in values:
                dtype = ("INT32", np.int32) if name == "top_k" else ("FP32", np.float32)
                extra = {name: (np.array([[value]], dtype=dtype[1]), dtype[0])}
                message = _grpc_error(served, model, _e2e_client_inputs(prompt, 4, False, **extra))
                assert "invalid" in message and name.split("_")[-1] in message, (model, name, value, message)
        # max_tokens or text_input missing while optional inputs are given (Triton's schema check lets it through)
        for missing in ("max_tokens", "text_input"):
            inputs = [i for i in _e2e_client_inputs(prompt, 4, False) if i.name() != missing]
            assert f"{missing} is required" in _grpc_error(served, model, inputs), (model, missing)
        status, text = served.post(model, {"text_input": prompt, "temperature": 0.5})
        assert "max_tokens is required" in text, text
        status, text = served.post(model, {"text_input": prompt})  # no optional input: Triton's own check
        assert "error" in text and "max_tokens" in text, text
        status, text = served.post(model, {"text_input": prompt, "max_tokens": -3})
        assert "max_tokens" in text and "> 0" in text, text
    assert served.server.model_ready("tensorrt_llm")
    served.generate("ensemble", prompt)


def test_min_tokens_and_min_length_both_reach_the_core(served, hf_greedy):
    """GenAI-Perf's fixed-length mode sends min_length = max_tokens: with the end id being the first greedy
    token, the request still makes max_tokens tokens (min_tokens >= request_output_len bans the end id)."""
    if served.method not in ("none", "draft_target"):
        pytest.skip("one ensemble-served and one BLS-driven method are enough")
    prompt = PROMPTS[0]
    end = hf_greedy[prompt][0]
    for name in ("min_length", "min_tokens"):
        for model in ("ensemble", "tensorrt_llm_bls"):
            body = served.generate(model, prompt, end_id=end, **{name: MAX_TOKENS})
            assert len(ids_of(body)) == MAX_TOKENS and end not in ids_of(body), (model, name)
            assert ids_of(served.generate(model, prompt, end_id=end)) == [], model
    status, text = served.post("ensemble", {"text_input": prompt, "max_tokens": 8, "min_tokens": 3, "min_length": 4})
    assert "disagree" in text, text


# A greedy request as NVIDIA's clients send it (top_k 1; a temperature, which the kernel applies before the
# penalties), with every penalty, a minimum length and log probs.
PENALISED = {
    "top_k": 1,
    "temperature": 0.8,
    "repetition_penalty": 1.3,
    "presence_penalty": 0.6,
    "frequency_penalty": 0.4,
    "min_tokens": 6,
    "return_log_probs": True,
}


@pytest.fixture(scope="module")
def penalised_baseline(checkpoints, hf_greedy, tmp_path_factory):
    """The baseline deployment's answers, in process: autoregressive decoding of the target engine with the same
    penalties, min_tokens, end id and log probs. PROMPTS[0] ends at its first greedy token (min_tokens holds it
    off), PROMPTS[1] at the tokenizer's end id. prompt -> (end id, Result)."""
    from transformers import AutoTokenizer

    from specbuild.reference.engine_folder import build_engine, load_engine
    from specbuild.reference.decoder.executor import Executor, Request, SamplingConfig

    tok = AutoTokenizer.from_pretrained(checkpoints["target"])
    folder = tmp_path_factory.mktemp("baseline") / "engine"
    build_engine(
        folder,
        role="target",
        method="none",
        model_dir=checkpoints["target"],
        dtype="float32",
        limits=dict(max_batch_size=4, max_input_len=64, max_seq_len=128, max_num_tokens=512, max_draft_len=0),
    )
    cfg = SamplingConfig(
        temperature=PENALISED["temperature"],
        top_k=1,
        **{k: PENALISED[k] for k in ("repetition_penalty", "presence_penalty", "frequency_penalty")},
    )
    ends = {PROMPTS[0]: hf_greedy[PROMPTS[0]][0], PROMPTS[1]: tok.eos_token_id}
    results = Executor(load_engine(folder)).run(
        [
            Request(
                input_ids=tok(p).input_ids,
                max_new_tokens=MAX_TOKENS,
                sampling=cfg,
                end_id=ends[p],
                min_tokens=PENALISED["min_tokens"],
                return_log_probs=True,
            )
            for p in PROMPTS
        ]
    )
    assert any(r.output_ids != hf_greedy[p] for p, r in zip(PROMPTS, results))  # the settings change the output
    assert len(results[0].output_ids) >= PENALISED["min_tokens"]
    return {p: (ends[p], r) for p, r in zip(PROMPTS, results)}


def floats(value) -> list[float]:
    return [float(v) for v in np.ravel(value)]


def test_penalties_min_tokens_and_log_probs_equal_the_baseline(served, penalised_baseline):
    """Through the ensemble and the BLS (speculative rounds for draft-target and prompt lookup), with every
    method's speculation: the tokens, cum_log_probs and output_log_probs (top-k 1 normalised: 0 per token, as
    TensorRT-LLM reports them) equal the baseline's; a BLS stream's chunks add up to the same."""
    for prompt, (end, base) in penalised_baseline.items():
        want_lp = [lp.normalized for lp in base.log_probs]
        for model in ("ensemble", "tensorrt_llm_bls"):
            body = served.generate(model, prompt, end_id=end, **PENALISED)
            assert ids_of(body) == base.output_ids, (served.method, model, prompt)
            assert floats(body["cum_log_probs"]) == pytest.approx([base.cum_log_prob], abs=1e-3), (model, prompt)
            assert floats(body["output_log_probs"]) == pytest.approx(want_lp, abs=1e-4), (model, prompt)
        if _streams_through(served, "tensorrt_llm_bls"):
            events = served.stream("tensorrt_llm_bls", prompt, end_id=end, stream=True, **PENALISED)
            chunks = [e for e in events if ids_of(e)]
            assert sum((ids_of(e) for e in chunks), []) == base.output_ids
            assert sum((floats(e["output_log_probs"]) for e in chunks), []) == pytest.approx(want_lp, abs=1e-4)
            assert floats(chunks[-1]["cum_log_probs"]) == pytest.approx([base.cum_log_prob], abs=1e-3)
    bad = {"repetition_penalty": 0.0}
    for model in ("ensemble", "tensorrt_llm_bls"):
        status, text = served.post(model, {"text_input": PROMPTS[0], "max_tokens": 4, **bad})
        assert "repetition_penalty=0.0 is invalid" in text, (model, text)


def test_metrics_endpoint_carries_the_speculative_counters(served):
    """The nv_trt_llm_* families upstream's backend exports (names and labels) and specbuild's speculative
    counters, whose deltas equal the per-request perf outputs of the serving model."""
    from specbuild.validate.server_metrics import SpecCounts, families, scrape, value

    url = served.server.metrics_url
    serving = "tensorrt_llm_bls" if served.method in ("draft_target", "prompt_lookup") else "tensorrt_llm"
    model = "tensorrt_llm_bls" if serving == "tensorrt_llm_bls" else "ensemble"
    before = scrape(url)
    drafted = accepted = tokens = 0
    for prompt in PROMPTS:
        body = served.generate(model, prompt, return_perf_metrics=True)
        drafted += body["total_draft_tokens"]
        accepted += body["total_accepted_draft_tokens"]
        tokens += len(ids_of(body))
    after = scrape(url)
    assert {
        "nv_trt_llm_request_metrics",
        "nv_trt_llm_kv_cache_block_metrics",
        "nv_trt_llm_inflight_batcher_metrics",
        "nv_trt_llm_general_metrics",
    } <= families(after)
    assert (
        value(after, "nv_trt_llm_request_metrics", model="tensorrt_llm", request_type="max", version="1")
        == served.recipe.build.max_batch_size
    )
    assert value(after, "nv_trt_llm_general_metrics", model="tensorrt_llm", general_type="iteration_counter") > (
        value(before, "nv_trt_llm_general_metrics", model="tensorrt_llm", general_type="iteration_counter") or 0
    )
    delta = SpecCounts.of(after, serving) - SpecCounts.of(before, serving)
    assert (delta.draft_tokens, delta.accepted) == (drafted, accepted)
    assert sum(delta.per_position) == accepted and delta.drafts <= delta.steps
    if served.method != "none":
        assert delta.steps > 0
    if serving == "tensorrt_llm_bls":
        # every target forward is a step: each yields one token of its own beside the drafts it accepted, and
        # the BLS's external drafts are verified from the prefill on (a round's target call decodes on alone
        # after a partial acceptance: those forwards count too)
        assert delta.steps == tokens - accepted, (delta, tokens)


def test_bls_draft_calls_make_exactly_k_tokens(served, checkpoints, hf_greedy):
    """As upstream's BLS, every draft call asks for exactly K tokens (min_tokens = request_output_len = K): with
    the end id set to the draft's first greedy token (which the target never makes early), the draft still
    proposes min(K, remaining - 1) tokens every round."""
    if served.method != "draft_target":
        pytest.skip("draft-target only")
    import torch
    from transformers import AutoTokenizer, LlamaForCausalLM

    k = served.recipe.speculation.num_draft_tokens
    tok = AutoTokenizer.from_pretrained(checkpoints["target"])
    draft = LlamaForCausalLM.from_pretrained(checkpoints["draft"], dtype=torch.float32).eval()
    chosen = None
    for prompt in PROMPTS + ["import os", "for i in range(10):"]:
        ids = tok(prompt, return_tensors="pt").input_ids
        with torch.no_grad():
            first = int(draft(ids).logits[0, -1].argmax())
        target = served.generate("ensemble", prompt)["output_ids"]
        if first not in ids_of({"output_ids": target}) and first != tok.eos_token_id:
            chosen = (prompt, first)
            break
    assert chosen, "no prompt whose draft's first token the target does not make (the checkpoints changed?)"
    prompt, end = chosen
    events = served.stream("tensorrt_llm_bls", prompt, end_id=end, return_perf_metrics=True, stream=True)
    sizes = [len(ids_of(e)) for e in events if ids_of(e)]
    assert sum(sizes) == MAX_TOKENS  # the end id never came: the target does not make it
    expected, remaining = 0, MAX_TOKENS
    for size in sizes:  # one chunk per round
        expected += min(k, remaining - 1)
        remaining -= size
    assert events[-1]["total_draft_tokens"] == expected > 0


# --- the validation suite on the same servers (moved from tests/validate/test_suite_reference.py) -------------
# A random-init model generates arbitrary bytes, so its streamed text may split a multi-byte character between
# responses (the functional check reports it; tolerated here only for random-init models and only that problem).
SUITE_PROMPTS = ["def add(a, b):\n    return", "x = [1, 2, 3]\ny = [1, 2,", "# Q: how do I print a list?\n# A:"]
SUITE_VALIDATION = {
    "prompts": SUITE_PROMPTS,
    "max_tokens": 12,
    "require_lossless": True,
    "concurrency": [1, 2],
    "min_acceptance_length": 1.0,
    "load_clients": 2,
    "load_seconds": 1.5,
    "sampling": {"temperature": 1.0, "top_k": 4, "trials": 40, "tokens": 2},
}
# eagle (the demo's method, ensemble), draft_target (the BLS and a draft model) and none (no baseline) run by
# default; the other methods add ~20-40 s each on 2 cores and are marked slow (`-m "not slow"` skips them).
SUITE_SLOW = {"medusa", "prompt_lookup", "lookahead"}


@pytest.fixture(scope="module")
def suite_baseline(checkpoints, tmp_path_factory):
    """The baseline deployment of the suite, shared by every method (same target, same limits, no speculation)."""
    from specbuild.compile import build_engines
    from specbuild.serve import TritonServer
    from specbuild.repository.engine.writer import write_repository

    recipe = make_recipe("eagle", checkpoints, SUITE_VALIDATION)
    root = tmp_path_factory.mktemp("suite-baseline")
    layout = Layout(root / "engines", root / "triton_repo", root / "reports", recipe.name)
    build_engines(resolve_build(recipe), layout)
    with TritonServer(
        write_repository(recipe, describe(recipe), layout, "baseline", flavour=runtime_for(recipe)),
        log_path=root / "tritonserver-baseline.log",
        exit_timeout_s=1,
    ) as server:
        yield server


# `served` parametrized here as its fixture is (same values, same order: the tests share its servers), to mark
# the slow methods' suite runs
@pytest.mark.parametrize(
    "served", [pytest.param(m, marks=pytest.mark.slow) if m in SUITE_SLOW else m for m in METHODS], indirect=True
)
def test_suite_on_the_reference_deployment(served, checkpoints, suite_baseline, tmp_path):
    from specbuild.methods import describe
    from specbuild.runtimes import runtime_for
    from specbuild.validate import Endpoints, SuiteOptions, run_validation
    from specbuild.validate.checks.functional import SPLIT_HINT

    method = served.method
    trained = checkpoints["target"] == ROOT / "checkpoints" / "tiny" / "target"
    recipe = make_recipe(method, checkpoints, SUITE_VALIDATION)
    speculative = method != "none"
    result = run_validation(
        resolve_build(recipe),
        Endpoints.of(served.server),
        Endpoints.of(suite_baseline) if speculative else None,
        report_dir=tmp_path / "report",
        options=SuiteOptions(requests_per_level=2, load_seconds=1.5, load_clients=2, sampling_trials=40),
    )
    status = {c.name: c.status for c in result.checks}
    summaries = {c.name: c.summary for c in result.checks}

    assert status["health"] == "passed", summaries["health"]
    if trained:
        assert status["functional"] == "passed", summaries["functional"]
    else:
        problems = result.check("functional").details["problems"]
        assert status["functional"] == "passed" or all(p.endswith(SPLIT_HINT) for p in problems), problems
    assert status["lossless"] == ("passed" if speculative else "skipped"), summaries["lossless"]
    assert status["bad_input"] == "passed", summaries["bad_input"]
    assert status["load"] in ("passed", "warned"), summaries["load"]
    # slower than the baseline at concurrency 1 (tiny models on CPU may be) is a warning, not a failure
    assert status["performance"] == "passed" or (
        status["performance"] == "warned" and result.check("performance").details["slower_than_baseline"]
    ), summaries["performance"]
    levels = result.check("performance").details["levels"]
    assert set(levels) == ({"speculative", "baseline"} if speculative else {"target"})
    # the cost model: the served engines decoded in process at each level, next to the sweep's served speedups
    cost = result.check("cost_model")
    if speculative:
        assert status["cost_model"] == "passed", summaries["cost_model"]
        served = {p["concurrency"]: p["speedup"] for p in result.check("performance").details["speedup"]}
        rows = cost.details["levels"]
        assert [r["concurrency"] for r in rows] == SUITE_VALIDATION["concurrency"]
        assert all(
            r["served"] == round(served[r["concurrency"]], 3)
            and r["limit"] > 0
            and r["t1_ms"] > 0
            and r["verify_ms"] > 0
            and r["in_process"] > 0
            for r in rows
        ), rows
        assert rows[0]["acceptance_length"] > 1, rows[0]  # drafting at concurrency 1
        # a drafting call is timed where a model drafts (a draft model or heads); prompt lookup and lookahead
        # draft from the tokens themselves, which the step's own time covers
        assert (rows[0]["draft_ms"] > 0) == (method not in ("prompt_lookup", "lookahead")), rows[0]
    else:
        assert status["cost_model"] == "skipped"

    acceptance = result.check("acceptance")
    if speculative:
        assert status["acceptance"] == "passed", summaries["acceptance"]
        assert acceptance.details["draft_tokens"] > 0 and acceptance.details["mean_acceptance_length"] >= 1.0
        # the server's speculative counters over the same requests (the metrics endpoint, scraped around the
        # greedy pass) equal the client's figures: same draft and accepted tokens, same steps, same AL
        server = acceptance.details["server_side"]
        assert server["available"] and server["agree"], server
        assert server["server"]["mean_acceptance_length"] == pytest.approx(acceptance.details["mean_acceptance_length"])
    else:
        assert status["acceptance"] == "skipped"

    sampling = result.check("sampling")
    if not speculative or runtime_for(recipe).sampling_refusal(describe(recipe)):  # no baseline / greedy only
        assert status["sampling"] == "skipped", summaries["sampling"]
    else:
        # a correct speculative sampler passes at significance 0.001 (a false alarm is a 1-in-1000 event)
        assert status["sampling"] == "passed", summaries["sampling"]
        assert sampling.details["dof"] >= 1
    assert (tmp_path / "report" / "report.json").is_file()


def test_a_core_that_is_not_decoupled_still_batches_in_flight(served):
    """As the C++ backend, the core batches requests in flight whether decoupled or not: a short request sent
    while a long one decodes on a non-decoupled core is answered first, not after it (the BLS loops of draft-target
    and prompt lookup call such cores once per round, several rows at a time)."""
    if served.method != "none":
        pytest.skip("the 'none' deployment's core is the one that is not decoupled")
    import tritonclient.grpc as grpcclient

    done = {}

    def infer(label, max_tokens):
        client = grpcclient.InferenceServerClient(served.server.grpc_url)
        try:
            client.infer("tensorrt_llm", _core_inputs(prompt, max_tokens, streaming=False))
            done[label] = time.monotonic()
        finally:
            client.close()

    prompt = [5, 9, 17, 5, 9]
    long_one = threading.Thread(target=infer, args=("long", served.recipe.build.max_seq_len - len(prompt)))
    long_one.start()
    time.sleep(0.1)  # the long request is decoding (it takes seconds here)
    infer("short", 2)
    long_one.join()
    assert done["short"] < done["long"], "the short request waited for the long one to finish"


def test_the_core_reuses_a_finished_requests_kv(served):
    """enable_kv_cache_reuse (true in the repository, as the C++ backend's default): a request whose prompt extends
    a finished one prefills only what is new, and says so in kv_cache_reused_blocks (blocks of one token)."""
    if served.method != "none":
        pytest.skip("the core's KV reuse is the same for every method")
    import tritonclient.grpc as grpcclient

    def infer(prompt):
        inputs = _core_inputs(prompt, 4, streaming=False) + [
            _grpc_input("return_perf_metrics", np.array([[True]], dtype=bool), "BOOL"),
            _grpc_input("exclude_input_in_output", np.array([[True]], dtype=bool), "BOOL"),
        ]
        client = grpcclient.InferenceServerClient(served.server.grpc_url)
        try:
            result = client.infer("tensorrt_llm", inputs)
        finally:
            client.close()
        return list(result.as_numpy("output_ids")[0][0]), int(result.as_numpy("kv_cache_reused_blocks").reshape(-1)[0])

    prompt = [7, 3, 11, 2, 19, 23, 5, 8, 13]
    first, reused_first = infer(prompt)
    _, reused_again = infer(prompt + first)
    assert reused_first == 0
    assert reused_again >= len(prompt)  # the finished request's prompt and its tokens but the last
