"""Hostile model.yaml edits and hostile requests, served for real by the llm-api reference core (the real
tritonserver): absurd limits fail model load naming the key, values the engine contract refuses are refused here
too, naming the value, and nothing runs past the model's 2,048 positions. One server, explicit model control: each
edited model.yaml is a copy of the repository's model loaded on its own, so every refusal is a real model load.
"""

from __future__ import annotations

import json
import math
import shutil
import urllib.error
import urllib.request

import numpy as np
import pytest
from test_served_llmapi import TINY, make_recipe, write_repo

pytestmark = pytest.mark.timeout(900)

# model name -> (edit of model.yaml's text, what the load failure says)
EDITS = {
    "seq_1e12": (
        lambda t: t.replace("max_seq_len: 128", "max_seq_len: 1000000000000"),
        "max_seq_len=1000000000000: Input should be less than or equal to 2147483647",
    ),
    "seq_beyond_positions": (
        lambda t: t.replace("max_seq_len: 128", "max_seq_len: 4096").replace(
            "max_input_len: 64", "max_input_len: 3000"
        ),
        "max_seq_len is 4096 but the model's max_position_embeddings is 2048",
    ),
    "draft_1e9": (
        lambda t: t.replace("max_draft_len: 3", "max_draft_len: 1000000000"),
        "speculative_config.max_draft_len is 1000000000 but max_seq_len is 128",
    ),
    "batch_1e12": (
        lambda t: t.replace("max_batch_size: 4\n", "max_batch_size: 1000000000000\n", 1),
        "max_batch_size=1000000000000: Input should be less than or equal to 2147483647",
    ),
    "cancel_1e30": (
        lambda t: t.replace(
            "cancellation_check_period_ms: 100", "cancellation_check_period_ms: 1000000000000000000000000000000"
        ),
        "cancellation_check_period_ms=1000000000000000000000000000000 — give a number of milliseconds",
    ),
}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    if not (TINY / "draft" / "config.json").is_file():
        pytest.skip("checkpoints/tiny not built")
    from specbuild.serve import TritonServer

    root = tmp_path_factory.mktemp("llmapi-hostile")
    repo = write_repo(make_recipe("draft_target"), root)
    model = repo / "tensorrt_llm"
    text = (model / "1" / "model.yaml").read_text()
    for name, (edit, _) in EDITS.items():
        edited = edit(text)
        assert edited != text, name
        shutil.copytree(model, repo / name)
        (repo / name / "1" / "model.yaml").write_text(edited)
        config = repo / name / "config.pbtxt"
        config.write_text(config.read_text().replace('name: "tensorrt_llm"', f'name: "{name}"', 1))
    with TritonServer(
        repo,
        log_path=root / "tritonserver.log",
        model_control="explicit",
        load_models=["tensorrt_llm"],
        exit_timeout_s=1,
    ) as served:
        yield served


def _post(server, path: str, body: dict, headers: dict | None = None) -> tuple[int, dict]:
    req = urllib.request.Request(
        server.http_url + path,
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json", **(headers or {})},
    )
    try:
        with urllib.request.urlopen(req, timeout=300) as r:
            return r.status, json.loads(r.read() or b"{}")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


@pytest.mark.parametrize("name", list(EDITS))
def test_an_absurd_limit_in_model_yaml_fails_model_load_naming_it(server, name):
    code, body = _post(server, f"/v2/repository/models/{name}/load", {}, server.admin_headers)
    assert code == 400, body
    assert EDITS[name][1] in body["error"], body["error"]
    assert not server.model_ready(name) and server.model_ready("tensorrt_llm")


def _grpc(server, **values):
    """One request over the gRPC stream (the model is decoupled; JSON cannot carry NaN or infinity): (text of the
    final response or None, error or None)."""
    import queue

    import tritonclient.grpc as grpcclient
    from tritonclient.utils import np_to_triton_dtype

    inputs = []
    for name, value in {"text_input": np.array([b"def add(a, b):"], dtype=np.object_), **values}.items():
        tensor = grpcclient.InferInput(name, list(value.shape), np_to_triton_dtype(value.dtype))
        tensor.set_data_from_numpy(value)
        inputs.append(tensor)
    answers = queue.Queue()
    client = grpcclient.InferenceServerClient(server.grpc_url)
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    try:
        client.async_stream_infer("tensorrt_llm", inputs, enable_empty_final_response=True)
        text = None
        while True:
            result, error = answers.get(timeout=300)
            if error is not None:
                return None, error.message()
            out = result.as_numpy("text_output")
            text = out[0].decode() if out is not None else text
            if result.get_response().parameters["triton_final_response"].bool_param:
                return text, None
    finally:
        client.stop_stream()
        client.close()


def _f32(value):
    return np.array([value], dtype=np.float32)


def _i32(value):
    return np.array([value], dtype=np.int32)


@pytest.mark.parametrize(
    "values, named",
    [
        ({"sampling_param_temperature": _f32(math.inf)}, "got temperature=inf"),
        ({"sampling_param_temperature": _f32(-math.inf)}, "got temperature=-inf"),
        ({"sampling_param_temperature": _f32(math.nan)}, "got temperature=nan"),
        ({"sampling_param_temperature": _f32(-1.0)}, "got temperature=-1.0"),
        ({"sampling_param_top_p": _f32(math.nan)}, "got top_p=nan"),
        ({"sampling_param_top_k": _i32(-1)}, "got top_k=-1"),
        ({"sampling_param_presence_penalty": _f32(math.inf)}, "sampling_param_presence_penalty=inf"),
        ({"sampling_param_frequency_penalty": _f32(math.nan)}, "sampling_param_frequency_penalty=nan"),
        ({"sampling_param_max_tokens": _i32(0)}, "got max_tokens=0"),
        ({"sampling_param_max_tokens": _i32(2**31 - 1)}, "max_tokens (2147483647) exceeds max_seq_len (128)"),
    ],
)
def test_a_hostile_request_is_refused_naming_the_value(server, values, named):
    text, error = _grpc(server, **{"sampling_param_max_tokens": _i32(4), **values})
    assert text is None and error.startswith("Error generating request: ") and named in error, (text, error)
    text, error = _grpc(server, sampling_param_max_tokens=_i32(4))
    assert error is None and text  # the model stays healthy


def test_a_prompt_longer_than_the_positions_never_runs(server):
    """3,000 tokens against a model of 2,048 positions (served with max_seq_len 128): refused at the door."""
    prompt = " ".join("abcdefghijklmnopqrstuvwxyz"[i % 26] for i in range(3000)).encode()
    text, error = _grpc(server, text_input=np.array([prompt], dtype=np.object_), sampling_param_max_tokens=_i32(4))
    assert text is None and "more than max_input_len (64)" in error, error
