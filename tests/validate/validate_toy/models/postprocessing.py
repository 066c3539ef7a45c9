"""Toy `postprocessing`: token ids -> text (inflight_batcher_llm/postprocessing@v0.19.0)."""

import numpy as np
import toy_lm
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            tokens = pb_utils.get_input_tensor_by_name(request, "TOKENS_BATCH").as_numpy()
            lengths = pb_utils.get_input_tensor_by_name(request, "SEQUENCE_LENGTH").as_numpy().reshape(-1)
            beam0 = tokens.reshape(tokens.shape[0], -1, tokens.shape[-1])[0][0][: int(lengths[0])]
            text = toy_lm.decode(beam0).encode()
            responses.append(
                pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUTPUT", np.array([[text]], dtype=object))])
            )
        return responses
