"""Triton `postprocessing` model (specbuild): token ids in, text out.

Self-contained (numpy, transformers, triton_python_backend_utils): it runs in NVIDIA's tritonserver containers,
where specbuild is not installed. Tensor contract: tensorrtllm_backend
all_models/inflight_batcher_llm/postprocessing/config.pbtxt@v0.19.0, plus one output of ours.

Inputs: TOKENS_BATCH [batch, beams, tokens] (tensorrt_llm's output_ids), SEQUENCE_LENGTH [batch, beams].
Outputs: OUTPUT [batch * beams] (rank 1, as upstream: a client reads text_output[0].decode()), the text of
tokens[:length] per beam; OUTPUT_IDS [batch, beams, max_length] the token ids that text was decoded from, rows
right-padded with -1.
Decoding is upstream's: `tokenizer.batch_decode(..., skip_special_tokens=<parameter>)` with the tokenizer's own
clean_up_tokenization_spaces (tokenizer_config.json; transformers' default when absent), so text spacing matches
an upstream deployment of the same tokenizer.
"""

import json
import os

import numpy as np
import triton_python_backend_utils as pb_utils
from model_parameters import ParameterError, bool_parameter, parameter


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        tokenizer_dir = parameter(config, "tokenizer_dir")
        if tokenizer_dir is None or not os.path.isdir(tokenizer_dir):
            raise pb_utils.TritonModelException(f"postprocessing: tokenizer_dir {tokenizer_dir!r} is not a folder — "
                                                "set it to the tokenizer folder of the target model")
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        from transformers import AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir, legacy=False, padding_side="left",
                                                       trust_remote_code=False)
        try:
            self.skip_special_tokens = bool_parameter(config, "skip_special_tokens", True)
        except ParameterError as e:
            raise pb_utils.TritonModelException(f"postprocessing: {e}") from None

    def execute(self, requests):
        responses = []
        for request in requests:
            try:
                responses.append(self.postprocess(request))
            except Exception as e:  # noqa: BLE001 - every failure becomes an error response
                responses.append(pb_utils.InferenceResponse(
                    error=pb_utils.TritonError(f"postprocessing failed: {type(e).__name__}: {e}")))
        return responses

    def postprocess(self, request):
        tokens = pb_utils.get_input_tensor_by_name(request, "TOKENS_BATCH").as_numpy()
        lengths = pb_utils.get_input_tensor_by_name(request, "SEQUENCE_LENGTH").as_numpy()
        if tokens.ndim == 2:  # [batch, tokens]: one beam
            tokens = tokens[:, None, :]
        lengths = lengths.reshape(tokens.shape[0], -1)
        batch, beams = tokens.shape[0], tokens.shape[1]
        if batch == 1 and beams == 1 and lengths.size == 1:
            # one row (every streamed response of a request): no padding, one decode; same text and ids as below
            row = tokens[0, 0, :int(lengths[0, 0])].astype(np.int32)
            text = self.tokenizer.batch_decode([row.tolist()], skip_special_tokens=self.skip_special_tokens)[0]
            return pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("OUTPUT", np.array([text.encode("utf-8")], dtype=object)),
                pb_utils.Tensor("OUTPUT_IDS", row.reshape(1, 1, -1))])
        width = int(lengths.max()) if lengths.size else 0
        ids = np.full([batch, beams, width], -1, dtype=np.int32)
        rows = []
        for b in range(batch):
            for k in range(beams):
                n = int(lengths[b, k]) if k < lengths.shape[1] else 0
                row = tokens[b, k, :n].astype(np.int64).tolist()
                rows.append(row)
                ids[b, k, :n] = row
        texts = self.tokenizer.batch_decode(rows, skip_special_tokens=self.skip_special_tokens)
        output = np.array([t.encode("utf-8") for t in texts], dtype=object)
        return pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUTPUT", output),
                                                          pb_utils.Tensor("OUTPUT_IDS", ids)])
