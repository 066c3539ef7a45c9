"""The GPU flavour in the real (CPU) tritonserver: its python models load and answer with explicit model
control; the TensorRT-LLM models get as far as the missing tensorrtllm backend (so Triton accepted their
config.pbtxt)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import numpy as np
import pytest
from repo_helpers import GPU_RECIPES, recipe_from, write_engine_configs
from tiny_models import build_tokenizer

from specbuild.plan import Layout
from specbuild.methods import describe
from specbuild.runtimes import runtime_for

pytestmark = pytest.mark.timeout(600)
PYTHON_MODELS = ["preprocessing", "postprocessing", "tensorrt_llm_bls"]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    from specbuild.serve import TritonServer
    from specbuild.repository.engine.writer import write_repository

    root = tmp_path_factory.mktemp("gpu-flavour")
    tokenizer = build_tokenizer(root / "tokenizer")
    recipe = recipe_from(next(p for p in GPU_RECIPES if p.stem == "draft_target"))
    recipe = recipe.model_copy(update={"model": recipe.model.model_copy(update={"checkpoint": root / "tokenizer"})})
    layout = Layout(root / "engines", root / "triton_repo", root / "reports", recipe.name)
    write_engine_configs(recipe, layout)
    repo = write_repository(recipe, describe(recipe), layout, flavour=runtime_for(recipe))
    with TritonServer(
        repo, model_control="explicit", load_models=PYTHON_MODELS, log_path=root / "tritonserver.log", exit_timeout_s=1
    ) as server:
        yield server, tokenizer


def _infer(server, model, inputs, outputs):
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(server.http_address)
    tensors = []
    for name, array, dtype in inputs:
        t = httpclient.InferInput(name, list(array.shape), dtype)
        t.set_data_from_numpy(array)
        tensors.append(t)
    result = client.infer(model, tensors, outputs=[httpclient.InferRequestedOutput(n) for n in outputs])
    return {n: result.as_numpy(n) for n in outputs}


def test_python_models_are_ready_and_the_trtllm_ones_are_not_loaded(served):
    server, _ = served
    assert all(server.model_ready(m) for m in PYTHON_MODELS)
    assert not server.model_ready("tensorrt_llm") and not server.model_ready("ensemble")


def test_preprocessing_ids_and_word_lists(served):
    server, tok = served
    prompt, stops = "def add(a, b):", ["return", "print"]
    out = _infer(
        server,
        "preprocessing",
        [
            ("QUERY", np.array([[prompt.encode()]], dtype=object), "BYTES"),
            ("REQUEST_OUTPUT_LEN", np.array([[8]], dtype=np.int32), "INT32"),
            ("STOP_WORDS_DICT", np.array([[w.encode() for w in stops]], dtype=object), "BYTES"),
        ],
        [
            "INPUT_ID",
            "REQUEST_INPUT_LEN",
            "STOP_WORDS_IDS",
            "BAD_WORDS_IDS",
            "OUT_END_ID",
            "OUT_PAD_ID",
            "DECODER_INPUT_ID",
            "REQUEST_DECODER_INPUT_LEN",
        ],
    )
    ids = tok.encode(prompt)
    # upstream's decoder-only values: [pad id], length 1 (the C++ backend reads them for encoder-decoder only)
    assert out["DECODER_INPUT_ID"].tolist() == [[tok.pad_token_id]]
    assert out["REQUEST_DECODER_INPUT_LEN"].tolist() == [[1]]
    assert out["INPUT_ID"][0].tolist() == ids and out["REQUEST_INPUT_LEN"][0].tolist() == [len(ids)]
    words = [tok.encode(w, add_special_tokens=False) for w in stops]
    flat = words[0] + words[1]
    stop = out["STOP_WORDS_IDS"][0]
    assert stop.shape == (2, len(flat))
    assert stop[0].tolist() == flat
    assert stop[1].tolist() == [len(words[0]), len(flat)] + [-1] * (len(flat) - 2)
    assert out["BAD_WORDS_IDS"].shape == (1, 2, 0)
    assert (int(out["OUT_END_ID"][0][0]), int(out["OUT_PAD_ID"][0][0])) == (tok.eos_token_id, tok.pad_token_id)


def test_postprocessing_decodes(served):
    server, tok = served
    ids = tok.encode("print(os.getcwd())", add_special_tokens=False)
    tokens = np.array([[ids + [0, 0]]], dtype=np.int32)
    out = _infer(
        server,
        "postprocessing",
        [("TOKENS_BATCH", tokens, "INT32"), ("SEQUENCE_LENGTH", np.array([[len(ids)]], dtype=np.int32), "INT32")],
        ["OUTPUT", "OUTPUT_IDS"],
    )
    assert out["OUTPUT"].shape == (1,)  # rank 1, [batch * beams], as upstream's postprocessing
    assert out["OUTPUT"][0].decode() == tok.decode(ids, skip_special_tokens=True)
    assert out["OUTPUT_IDS"].reshape(-1).tolist() == ids


def test_trtllm_models_fail_only_for_the_missing_backend(served):
    server, _ = served
    # explicit model control: the model-repository API needs the server's admin key
    req = urllib.request.Request(
        f"{server.http_url}/v2/repository/models/tensorrt_llm/load",
        data=b"{}",
        method="POST",
        headers=server.admin_headers,
    )
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(req, timeout=60)
    body = json.loads(err.value.read())
    assert "unable to find backend library for backend 'tensorrtllm'" in body["error"]
    assert server.model_ready("preprocessing")
