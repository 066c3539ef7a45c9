"""postprocessing/model.py's one-row path (every streamed response) answers exactly what its general path answers
for the same row: the text and OUTPUT_IDS of a [1, 1, n] TOKENS_BATCH, sequence lengths short of the width
included. The model runs here with a stand-in for triton_python_backend_utils (tensors are plain arrays)."""

from __future__ import annotations

import importlib.util
import sys
import types

import numpy as np
import pytest
from repo_helpers import ROOT

MODELS = ROOT / "pipeline" / "specbuild" / "repository" / "engine" / "models"
STANDALONE = ROOT / "pipeline" / "specbuild" / "standalone"  # what the models import by file name (model_parameters)


class _Tensor:
    def __init__(self, name, array):
        self.name, self.array = name, array

    def as_numpy(self):
        return self.array


@pytest.fixture(scope="module")
def postprocessing(monkeypatch_module):
    pb = types.ModuleType("triton_python_backend_utils")
    pb.Tensor = _Tensor
    pb.InferenceResponse = lambda output_tensors: {t.name: t.array for t in output_tensors}
    pb.get_input_tensor_by_name = lambda request, name: request.get(name)
    monkeypatch_module.setitem(sys.modules, "triton_python_backend_utils", pb)
    monkeypatch_module.syspath_prepend(str(STANDALONE))
    spec = importlib.util.spec_from_file_location("postprocessing_model", MODELS / "postprocessing" / "model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    from transformers import AutoTokenizer

    model = module.TritonPythonModel.__new__(module.TritonPythonModel)
    model.tokenizer = AutoTokenizer.from_pretrained(ROOT / "checkpoints" / "tiny" / "target")
    model.skip_special_tokens = True
    return model


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as mp:
        yield mp


def request(tokens: np.ndarray, lengths: list[int]) -> dict:
    return {
        "TOKENS_BATCH": _Tensor("", tokens),
        "SEQUENCE_LENGTH": _Tensor("", np.array([[n] for n in lengths], dtype=np.int32)),
    }


def test_one_row_answers_what_two_rows_answer_for_it(postprocessing):
    if not (ROOT / "checkpoints" / "tiny" / "target" / "config.json").is_file():
        pytest.skip("checkpoints/tiny is not in this checkout")
    rng = np.random.default_rng(0)
    vocab = len(postprocessing.tokenizer)
    for _ in range(100):
        n = int(rng.integers(0, 6))
        row = rng.integers(0, vocab, size=(1, 1, n + int(rng.integers(0, 3)))).astype(np.int32)
        one = postprocessing.postprocess(request(row, [n]))
        two = postprocessing.postprocess(request(np.concatenate([row, row]), [n, n]))  # the general path
        assert one["OUTPUT"].tolist() == two["OUTPUT"][:1].tolist()
        assert one["OUTPUT_IDS"].tolist() == two["OUTPUT_IDS"][:1].tolist()
        assert (one["OUTPUT"].dtype, one["OUTPUT_IDS"].dtype) == (two["OUTPUT"].dtype, two["OUTPUT_IDS"].dtype)
        assert one["OUTPUT_IDS"].shape == (1, 1, n)
