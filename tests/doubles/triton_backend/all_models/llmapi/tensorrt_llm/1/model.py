"""TEST DOUBLE of NVIDIA's llmapi Triton model (triton_backend/all_models/llmapi/tensorrt_llm/1/model.py), written
by specbuild from that file's behaviour at TensorRT-LLM @b35ac1b (multi-instance: @044a90d). It is not NVIDIA's code.

What it does as the real one does: reads `model.yaml` (or $LLM_CONFIG_PATH) next to itself, requires
triton_config.max_batch_size and triton_config.decoupled, passes every other key through
`tensorrt_llm.llmapi.llm_utils.update_llm_args_with_extra_dict({}, ...)` and builds `tensorrt_llm.LLM(**args)` from
the result (model.py@b35ac1b `_init_engine`; the double's release decides the parse path), so a model.yaml the real
model would refuse fails model load here too. Like the multi-instance model (model.py@044a90d, tensorrtllm_backend
docs/llmapi.md@0b9d7d5) it reads config.pbtxt's `gpu_device_ids` ("0,1;2,3": ';' between instances) and gives each
instance its group as CUDA_VISIBLE_DEVICES. It does not generate: every request gets an error response.
"""

import os
import sys


def _use_pythonpath():  # the stub's embedded Python ignores PYTHONPATH (nvidia-pytriton 0.7.0)
    for entry in reversed(os.environ.get("PYTHONPATH", "").split(os.pathsep)):
        if entry and entry not in sys.path:
            sys.path.insert(0, entry)


_use_pythonpath()

import triton_python_backend_utils as pb_utils  # noqa: E402
import yaml  # noqa: E402  (NVIDIA's model reads model.yaml with PyYAML)


def get_model_config(filename="model.yaml"):
    filename = os.environ.get("LLM_CONFIG_PATH", filename)
    with open(os.path.join(pb_utils.get_model_dir(), filename)) as f:
        return yaml.safe_load(f)


def instance_gpus(args) -> str | None:
    """This instance's GPU group from config.pbtxt's gpu_device_ids (None: the parameter is not set)."""
    import json

    parameters = json.loads(args["model_config"]).get("parameters", {})
    groups = (parameters.get("gpu_device_ids") or {}).get("string_value")
    if not groups:
        return None
    index = int(args.get("model_instance_name", "_0").rsplit("_", 1)[-1] or 0)
    groups = groups.split(";")
    return groups[index % len(groups)]


class TritonPythonModel:
    def initialize(self, args):
        gpus = instance_gpus(args)
        if gpus is not None:
            os.environ["CUDA_VISIBLE_DEVICES"] = gpus
        config = get_model_config()
        triton_config = config.pop("triton_config")
        self.decoupled = bool(triton_config["decoupled"])
        int(triton_config["max_batch_size"])
        from tensorrt_llm import LLM
        from tensorrt_llm.llmapi.llm_utils import update_llm_args_with_extra_dict

        self.llm = LLM(**update_llm_args_with_extra_dict({}, config))

    def execute(self, requests):
        error = pb_utils.TritonError("specbuild's test double of NVIDIA's llmapi model does not generate")
        if self.decoupled:
            for request in requests:
                request.get_response_sender().send(pb_utils.InferenceResponse(error=error),
                                                   flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            return None
        return [pb_utils.InferenceResponse(error=error) for _ in requests]

    def finalize(self):
        self.llm.shutdown()
