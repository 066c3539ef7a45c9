"""Toy `preprocessing`: text -> byte token ids, stop words -> the [2, L] word-list format
(inflight_batcher_llm/preprocessing@v0.19.0)."""

import numpy as np
import toy_lm
import triton_python_backend_utils as pb_utils


def _words(request, name):
    t = pb_utils.get_input_tensor_by_name(request, name)
    if t is None:
        return np.zeros((1, 2, 0), dtype=np.int32)
    words = [w if isinstance(w, bytes) else str(w).encode() for w in t.as_numpy().reshape(-1)]
    ids, offsets = [], []
    for w in words:
        if w:
            ids += toy_lm.encode(w)
            offsets.append(len(ids))
    if not ids:
        return np.zeros((1, 2, 0), dtype=np.int32)
    row1 = offsets + [-1] * (len(ids) - len(offsets))
    return np.array([[ids, row1]], dtype=np.int32)


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            query = pb_utils.get_input_tensor_by_name(request, "QUERY").as_numpy().reshape(-1)[0]
            query = query if isinstance(query, bytes) else str(query).encode()
            ids = toy_lm.encode(query)
            out_len = pb_utils.get_input_tensor_by_name(request, "REQUEST_OUTPUT_LEN").as_numpy().reshape(-1)[0]
            responses.append(
                pb_utils.InferenceResponse(
                    output_tensors=[
                        pb_utils.Tensor("INPUT_ID", np.array([ids], dtype=np.int32)),
                        pb_utils.Tensor("REQUEST_INPUT_LEN", np.array([[len(ids)]], dtype=np.int32)),
                        pb_utils.Tensor("REQUEST_OUTPUT_LEN", np.array([[out_len]], dtype=np.int32)),
                        pb_utils.Tensor("STOP_WORDS_IDS", _words(request, "STOP_WORDS_DICT")),
                        pb_utils.Tensor("OUT_END_ID", np.array([[toy_lm.EOS]], dtype=np.int32)),
                        pb_utils.Tensor("OUT_PAD_ID", np.array([[toy_lm.EOS]], dtype=np.int32)),
                    ]
                )
            )
        return responses
