"""The llm-api flavour on the reference runtime, served by the real tritonserver (nvidia-pytriton's): the
repository NVIDIA documents (one `tensorrt_llm` model, config.pbtxt + 1/model.yaml) with specbuild's model.py.

Requests are shaped as NVIDIA documents them (tensorrtllm_backend docs/llmapi.md@0b9d7d5, the tutorial's curl `generate`
/ `generate_stream`: `{"text_input": ..., "sampling_param_max_tokens": ...}`), and answers are checked against an
independent implementation: Hugging Face `generate` on the same checkpoint, decoded with the same tokenizer. One server
per deployment (module-scoped): no speculation and not decoupled, prompt lookup (NGram), draft-target, and EAGLE-3 where
the reference method and the tiny head are there.
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

from specbuild.plan import Layout
from specbuild.recipe.schema import Recipe
from specbuild.methods import describe

pytestmark = pytest.mark.timeout(900)

TINY = ROOT / "checkpoints" / "tiny"
PROMPTS = ["def add(a, b):", "class Stack:\n    def push(self, item):"]
MAX_TOKENS = 12
METHODS = {
    "none": ({"method": "none"}, False),
    "prompt_lookup": ({"method": "prompt_lookup", "max_draft_len": 3, "max_matching_ngram_size": 2}, True),
    "draft_target": ({"method": "draft_target", "checkpoint": str(TINY / "draft"), "num_draft_tokens": 3}, True),
    "eagle3": (
        {"method": "eagle3", "checkpoint": str(TINY / "eagle3"), "max_draft_len": 3, "layers_to_capture": [0, 1, 3]},
        True,
    ),
}


def eagle3_missing() -> str | None:
    from specbuild.reference.llmapi_engine import method_available

    if not method_available("eagle3"):
        return "the reference EAGLE-3 method is not in this specbuild yet"
    if not (TINY / "eagle3" / "config.json").is_file():
        return "checkpoints/tiny/eagle3 is not there"
    return None


def make_recipe(method: str, **triton) -> Recipe:
    spec, streaming = METHODS[method]
    return Recipe.model_validate(
        {
            "name": f"llmapi-{method}",
            "runtime": "reference",
            "flavour": "llm-api",
            "model": {"checkpoint": str(TINY / "target"), "dtype": "float32"},
            "speculation": spec,
            "build": {"max_batch_size": 4, "max_input_len": 64, "max_seq_len": 128},
            "triton": {"streaming": streaming, **triton},
            # one deployment speaks the 1.3 template (all 22 inputs, LoRA and image_url among them)
            **({"llm_api": {"release": "1.3"}} if method == "none" else {}),
        }
    )


def write_repo(recipe: Recipe, root: Path) -> Path:
    from specbuild.runtimes import runtime_for

    layout = Layout(root / "engines", root / "triton_repo", root / "reports", recipe.name)
    return runtime_for(recipe).write_repository(recipe, describe(recipe), layout, "target")


class Served:
    def __init__(self, method, recipe, server):
        self.method, self.recipe, self.server = method, recipe, server

    def post(self, body: dict, endpoint: str = "generate"):
        req = urllib.request.Request(
            f"{self.server.http_url}/v2/models/tensorrt_llm/{endpoint}",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(req, timeout=120) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def generate(self, prompt: str, **extra) -> dict:
        status, text = self.post({"text_input": prompt, "sampling_param_max_tokens": MAX_TOKENS, **extra})
        body = json.loads(text)
        assert status == 200 and "error" not in body, body
        return body

    def error(self, body: dict, endpoint: str = "generate") -> str:
        status, text = self.post(body, endpoint)
        if endpoint == "generate_stream":
            events = [json.loads(ln[len("data: ") :]) for ln in text.splitlines() if ln.startswith("data: ")]
            body = events[-1] if events else json.loads(text)
        else:
            body = json.loads(text)
        assert "error" in body, body
        return body["error"]

    def stream(self, prompt: str, **extra) -> list[dict]:
        status, text = self.post(
            {"text_input": prompt, "sampling_param_max_tokens": MAX_TOKENS, "streaming": True, **extra},
            "generate_stream",
        )
        assert status == 200, text
        events = [json.loads(ln[len("data: ") :]) for ln in text.splitlines() if ln.startswith("data: ")]
        assert events and not any("error" in e for e in events), events
        return events


@pytest.fixture(scope="module", params=list(METHODS))
def served(request, tmp_path_factory):
    import torch

    torch.set_num_threads(1)
    if not (TINY / "target" / "config.json").is_file():
        pytest.skip("checkpoints/tiny not built")
    if request.param == "eagle3" and eagle3_missing():
        pytest.skip(eagle3_missing())
    from specbuild.serve import TritonServer

    recipe = make_recipe(request.param)
    root = tmp_path_factory.mktemp(f"llmapi-{request.param}")
    with TritonServer(write_repo(recipe, root), log_path=root / "tritonserver.log", exit_timeout_s=1) as server:
        yield Served(request.param, recipe, server)


@pytest.fixture(scope="module")
def hf(request):
    """Greedy continuations by Hugging Face transformers on the target (end id excluded), and the tokenizer."""
    import torch
    from transformers import AutoTokenizer, LlamaForCausalLM

    tok = AutoTokenizer.from_pretrained(TINY / "target")
    model = LlamaForCausalLM.from_pretrained(TINY / "target", dtype=torch.float32).eval()
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
        out[prompt] = (ids[0].tolist(), new[: new.index(tok.eos_token_id)] if tok.eos_token_id in new else new)
    return tok, out


def test_generate_as_nvidia_documents_echoes_the_prompt_and_is_greedy(served, hf):
    tok, greedy = hf
    for prompt in PROMPTS:
        prompt_ids, new = greedy[prompt]
        body = served.generate(prompt)  # NVIDIA's curl: text_input + sampling_param_max_tokens, nothing else
        assert body["text_output"] == tok.decode(prompt_ids + new, skip_special_tokens=True), (served.method, prompt)
        plain = served.generate(prompt, sampling_param_exclude_input_from_output=True)
        assert plain["text_output"] == tok.decode(new, skip_special_tokens=True), (served.method, prompt)
        assert set(body) == {"model_name", "model_version", "text_output"}  # optional outputs only when asked


@pytest.fixture(scope="module")
def penalised_baseline(hf, tmp_path_factory):
    """In-process autoregressive decoding of the target with presence and frequency penalties in TorchSampler's
    order (penalties, then temperature), decoded as the LLM decodes: the baseline of every llm-api deployment."""
    from specbuild.reference.engine_folder import build_engine, load_engine
    from specbuild.reference.decoder.executor import Executor, Request, SamplingConfig

    tok, greedy = hf
    folder = tmp_path_factory.mktemp("llmapi-baseline") / "engine"
    build_engine(
        folder,
        role="target",
        method="none",
        model_dir=TINY / "target",
        dtype="float32",
        limits=dict(max_batch_size=4, max_input_len=64, max_seq_len=128, max_num_tokens=512, max_draft_len=0),
    )
    cfg = SamplingConfig(
        presence_penalty=PENALTIES["sampling_param_presence_penalty"],
        frequency_penalty=PENALTIES["sampling_param_frequency_penalty"],
        penalties_before_temperature=True,
    )
    results = Executor(load_engine(folder)).run(
        [
            Request(input_ids=greedy[p][0], max_new_tokens=MAX_TOKENS, sampling=cfg, end_id=tok.eos_token_id)
            for p in PROMPTS
        ]
    )
    return {p: tok.decode(r.output_ids, skip_special_tokens=True) for p, r in zip(PROMPTS, results)}


PENALTIES = {"sampling_param_presence_penalty": 1.2, "sampling_param_frequency_penalty": 0.6}


def test_presence_and_frequency_penalties_equal_the_baseline(served, hf, penalised_baseline):
    """sampling_param_presence_penalty / frequency_penalty are served by every method, equal to autoregressive
    decoding with the same penalties (and they change the greedy text, so the comparison means something)."""
    tok, greedy = hf
    for prompt in PROMPTS:
        body = served.generate(prompt, sampling_param_exclude_input_from_output=True, **PENALTIES)
        assert body["text_output"] == penalised_baseline[prompt], (served.method, prompt)
    assert any(penalised_baseline[p] != tok.decode(greedy[p][1], skip_special_tokens=True) for p in PROMPTS)


def test_max_tokens_defaults_to_32(served, hf):
    tok, _ = hf
    status, text = served.post(
        {"text_input": PROMPTS[0], "sampling_param_exclude_input_from_output": True, "return_finish_reason": True}
    )
    body = json.loads(text)
    n = len(tok.encode(body["text_output"], add_special_tokens=False))
    assert body["finish_reason"] == "length" and 28 <= n <= 36  # 32 generated tokens, re-encoded


def test_streams_are_cumulative_and_end_with_the_whole_text(served):
    if not served.recipe.triton.streaming:
        message = served.error({"text_input": PROMPTS[0], "streaming": True}, "generate_stream")
        assert message == "Error generating request: Streaming is only supported in decoupled mode."
        return
    whole = served.generate(PROMPTS[1], sampling_param_exclude_input_from_output=True)["text_output"]
    texts = [e["text_output"] for e in served.stream(PROMPTS[1], sampling_param_exclude_input_from_output=True)]
    assert len(texts) > 1 and texts[-1] == whole
    assert all(b.startswith(a) for a, b in zip(texts, texts[1:]))  # cumulative (CompletionOutput.text)
    echoed = [e["text_output"] for e in served.stream(PROMPTS[1])]
    assert echoed[0].startswith(PROMPTS[1]) and echoed[-1].endswith(whole)


def test_perf_metrics_are_twelve_strings_with_the_real_speculative_counters(served):
    body = served.generate(
        PROMPTS[1],
        sampling_param_return_perf_metrics=True,
        return_finish_reason=True,
        return_stop_reason=True,
        return_cumulative_logprob=True,
    )
    perf = {
        k: v
        for k, v in body.items()
        if k not in ("model_name", "model_version", "text_output", "finish_reason", "stop_reason", "cumulative_logprob")
    }
    assert len(perf) == 12 and all(isinstance(v, str) for v in perf.values())  # BYTES on the wire
    assert (body["finish_reason"], body["stop_reason"], body["cumulative_logprob"]) == ("length", "None", "None")
    drafted, accepted = int(perf["total_draft_tokens"]), int(perf["total_accepted_draft_tokens"])
    times = [
        int(perf[k])
        for k in ("arrival_time_ns", "first_scheduled_time_ns", "first_token_time_ns", "last_token_time_ns")
    ]
    assert times == sorted(times) and times[0] > 0
    if served.method == "none":
        assert (drafted, accepted, float(perf["acceptance_rate"])) == (0, 0, 0.0)
    else:
        assert drafted > 0 and 0 <= accepted <= drafted
        assert float(perf["acceptance_rate"]) == pytest.approx(accepted / drafted)


def test_a_stop_string_ends_the_text_before_it(served):
    plain = served.generate(PROMPTS[0], sampling_param_exclude_input_from_output=True)["text_output"]
    word = next(w for w in plain.split() if len(w) > 1 and plain.find(w) > 2)
    body = served.generate(
        PROMPTS[0],
        sampling_param_exclude_input_from_output=True,
        sampling_param_stop=[word],
        return_finish_reason=True,
        return_stop_reason=True,
    )
    assert body["text_output"] == plain[: plain.find(word)]
    assert (body["finish_reason"], body["stop_reason"]) == ("stop", word)


@pytest.mark.parametrize(
    "body, message",
    [
        ({"text_input": "x", "sampling_param_top_p": 2.0}, "require 0 <= top_p <= 1, got top_p=2.0"),
        ({"text_input": "x", "sampling_param_best_of": 2}, "sampling_param_best_of=2 is not supported"),
        ({"sampling_param_max_tokens": 4}, "text_input is missing from the request"),
    ],
)
def test_errors_are_one_final_error_and_the_model_stays_healthy(served, body, message):
    error = served.error(body)
    assert error.startswith("Error generating request: ") and message in error
    assert served.generate(PROMPTS[0])["text_output"]


def test_stop_without_a_request_id_is_refused(served):
    assert served.error({"text_input": "", "stop": True}) == "A request id must be provided for request cancellation"
    assert served.error({"id": "nobody", "text_input": "", "stop": True}) == "Request cancelled by client"


def test_concurrent_requests_decode_together_and_answer_each_their_own(served):
    want = {p: served.generate(p, sampling_param_exclude_input_from_output=True)["text_output"] for p in PROMPTS}
    got: dict = {}

    def ask(i):
        p = PROMPTS[i % 2]
        got[i] = (p, served.generate(p, sampling_param_exclude_input_from_output=True)["text_output"])

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == 6 and all(text == want[p] for p, text in got.values())


def _grpc_input(name, array, dtype):
    import tritonclient.grpc as grpcclient

    inp = grpcclient.InferInput(name, list(array.shape), dtype)
    inp.set_data_from_numpy(array)
    return inp


REFUSED = {  # the newest template's inputs the reference runtime cannot honour (config.pbtxt@0a71057) -> a value
    "lora_id": np.array([3], dtype=np.uint64),
    "lora_name": np.array([b"adapter"], dtype=object),
    "lora_path": np.array([b"/adapters/a"], dtype=object),
    "lora_ckpt_source": np.array([b"hf"], dtype=object),
    "image_url": np.array([b"https://example.com/cat.png"], dtype=object),
}


def _grpc_refusal(served, name) -> tuple[str, str]:
    """(status, message) of a gRPC request carrying `name`: unary infer on a plain deployment, the stream's error on
    a decoupled one (a stream's errors travel as messages inside a successful stream: no status of their own)."""
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException, np_to_triton_dtype

    value = REFUSED[name]
    inputs = [
        _grpc_input("text_input", np.array([PROMPTS[0].encode()], dtype=object), "BYTES"),
        _grpc_input("sampling_param_max_tokens", np.array([4], dtype=np.int32), "INT32"),
        _grpc_input(name, value, np_to_triton_dtype(value.dtype)),
    ]
    client = grpcclient.InferenceServerClient(served.server.grpc_url)
    try:
        if not served.recipe.triton.streaming:
            with pytest.raises(InferenceServerException) as caught:
                client.infer("tensorrt_llm", inputs)
            return str(caught.value.status()), caught.value.message()
        results: queue.Queue = queue.Queue()
        client.start_stream(callback=lambda result=None, error=None: results.put((result, error)))
        client.async_stream_infer("tensorrt_llm", inputs, enable_empty_final_response=True)
        result, error = results.get(timeout=120)
        assert error is not None, result.get_response()
        return "stream", error.message()
    finally:
        if served.recipe.triton.streaming:
            client.stop_stream()
        client.close()


@pytest.mark.parametrize("name", list(REFUSED))
def test_the_newest_templates_inputs_are_refused_naming_them(served, name):
    """Issue #39 item 1: a LoRA or image_url field is refused in one sentence naming it, never answered as if it were
    absent. The repository declares the template of its release, as NVIDIA's does (the same config.pbtxt on a GPU):
    where the 1.3 template declares the input, the model refuses it (HTTP 400, gRPC INVALID_ARGUMENT; a decoupled
    model's stream carries the sentence); where the release's template does not, the generate endpoint hands the
    field to the model as a request parameter and the model refuses that, and Triton itself refuses it as an input
    of another protocol."""
    from specbuild.repository.llmapi import tensors

    with urllib.request.urlopen(f"{served.server.http_url}/v2/models/tensorrt_llm/config", timeout=60) as r:
        declared = [i["name"] for i in json.loads(r.read())["input"]]
    assert declared == [t.name for t in tensors.inputs(served.recipe.llm_api.release)]
    value = REFUSED[name].reshape(-1)[0]
    body = {
        "text_input": PROMPTS[0],
        "sampling_param_max_tokens": 4,
        name: value.decode() if isinstance(value, bytes) else int(value),
    }
    status, text = served.post(body)
    sentence = f"{name} is not supported: the reference runtime cannot serve "
    assert status == 400 and sentence in json.loads(text)["error"], (status, text)
    status, message = _grpc_refusal(served, name)
    want = "stream" if served.recipe.triton.streaming else "StatusCode.INVALID_ARGUMENT"
    said = sentence if name in declared else f"unexpected inference input '{name}'"
    assert status == want and said in message, (status, message)
    assert served.generate(PROMPTS[0])["text_output"]  # the model stays healthy


def test_stop_with_the_request_id_cancels_a_running_stream(served):
    if not served.recipe.triton.streaming:
        pytest.skip("streams need the decoupled deployment")
    import tritonclient.grpc as grpcclient

    results: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(served.server.grpc_url)
    try:
        client.start_stream(callback=lambda result=None, error=None: results.put((result, error)))
        inputs = [
            _grpc_input("text_input", np.array([PROMPTS[0].encode()], dtype=object), "BYTES"),
            _grpc_input("streaming", np.array([True]), "BOOL"),
            _grpc_input("sampling_param_max_tokens", np.array([100], dtype=np.int32), "INT32"),
        ]
        # a busy machine may finish the whole stream between the stop's answer and the executor's next step: that
        # attempt proves nothing, so it is tried again (a server that ignores the stop fails every attempt)
        for attempt in range(3):
            rid = f"run-{attempt}"
            client.async_stream_infer("tensorrt_llm", inputs, request_id=rid, enable_empty_final_response=True)
            result, error = results.get(timeout=120)
            assert error is None
            assert served.error({"id": rid, "text_input": "", "stop": True}) == "Request cancelled by client"
            responses, ran_to_end = 1, False
            while True:
                result, error = results.get(timeout=120)
                if error is not None:
                    assert "Request cancelled by client" in str(error)
                    break
                responses += 1
                final = result.get_response().parameters.get("triton_final_response")
                if final is not None and final.bool_param:
                    ran_to_end = True
                    break
            if not ran_to_end:
                break
        assert not ran_to_end, "the stream ran to its end in every attempt: the stop did not cancel it"
        assert responses < 100
    finally:
        client.stop_stream()
        client.close()
    assert served.generate(PROMPTS[0])["text_output"]


def test_an_unknown_model_yaml_key_fails_model_load_naming_it(tmp_path):
    if not (TINY / "target" / "config.json").is_file():
        pytest.skip("checkpoints/tiny not built")
    from specbuild.errors import UserError
    from specbuild.serve import TritonServer

    repo = write_repo(make_recipe("prompt_lookup"), tmp_path)
    path = repo / "tensorrt_llm" / "1" / "model.yaml"
    path.write_text(path.read_text().replace("max_num_tokens:", "max_num_tokenz:"))
    with pytest.raises(UserError, match=r"unknown key max_num_tokenz"):
        with TritonServer(repo, log_path=tmp_path / "tritonserver.log"):
            pass
