"""`tensorrt_llm/config.pbtxt` of the llm-api flavour as a `model_config_pb2.ModelConfig` message (TensorRT-LLM
triton_backend/all_models/llmapi/tensorrt_llm/config.pbtxt@c8c6df0 and 1/model.py@b35ac1b): Python backend,
max_batch_size 0, and the decoupled policy written into config.pbtxt as well as into model.yaml's triton_config
(launch_triton_server.py starts tritonserver with --disable-auto-complete-config, so model.yaml alone would not
make the model decoupled)."""

from __future__ import annotations

from specbuild.repository.llmapi import tensors
from specbuild.repository.engine.configs import _add_tensors, _mc, config_problems, to_pbtxt  # noqa: F401 (re-exported)

MODEL = "tensorrt_llm"
GPU_IDS_PARAMETER = "gpu_device_ids"  # what NVIDIA's multi-instance model.py reads (llmapi 1/model.py@044a90d)


def gpu_groups(recipe) -> list[list[int]]:
    """The GPUs of each instance: triton.gpu_device_ids split into llm_api.instances groups of tp * pp."""
    world = recipe.build.tp_size * recipe.build.pp_size
    ids = list(recipe.triton.gpu_device_ids)
    n = recipe.llm_api.instances
    if len(ids) == world * n:
        return [ids[i * world : (i + 1) * world] for i in range(n)]
    return [ids[:world] for _ in range(n)]  # every instance on the same GPUs ("0;0": a smaller KV fraction)


def model_config(recipe):
    mc = _mc()
    cfg = mc.ModelConfig()
    cfg.name = MODEL
    cfg.backend = "python"
    cfg.max_batch_size = 0  # one prompt per request; the LLM batches in flight (llmapi 1/model.py@b35ac1b)
    if recipe.triton.streaming:
        cfg.model_transaction_policy.decoupled = True
    _add_tensors(cfg.input, tensors.inputs(recipe.llm_api.release), inputs=True)
    _add_tensors(cfg.output, tensors.OUTPUTS, inputs=False)
    group = cfg.instance_group.add()
    group.count = recipe.llm_api.instances
    group.kind = mc.ModelInstanceGroup.Kind.Value("KIND_CPU")
    if recipe.llm_api.instances > 1:  # multi-instance (model.py@044a90d): ';' between instances, ',' within one
        cfg.parameters[GPU_IDS_PARAMETER].string_value = ";".join(",".join(map(str, g)) for g in gpu_groups(recipe))
    return cfg
