"""Toy `tensorrt_llm_bls` (decoupled): forwards each request to the ensemble and streams its responses back."""

import threading

import triton_python_backend_utils as pb_utils

OUTPUTS = ["text_output", "output_ids", "acceptance_rate", "total_accepted_draft_tokens", "total_draft_tokens"]


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            threading.Thread(target=self._forward, args=(request,), daemon=True).start()
        return None

    def _forward(self, request):
        sender = request.get_response_sender()
        try:
            inner = pb_utils.InferenceRequest(
                model_name="ensemble", inputs=request.inputs(), requested_output_names=OUTPUTS
            )
            for response in inner.exec(decoupled=True):
                if response.has_error():
                    sender.send(
                        pb_utils.InferenceResponse(error=response.error()),
                        flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
                    )
                    return
                if not response.output_tensors():
                    continue
                sender.send(pb_utils.InferenceResponse(output_tensors=response.output_tensors()))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        except Exception as e:  # noqa: BLE001
            sender.send(
                pb_utils.InferenceResponse(error=pb_utils.TritonError(str(e))),
                flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
            )
