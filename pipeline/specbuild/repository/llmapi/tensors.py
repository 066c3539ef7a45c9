"""The tensor contract of NVIDIA's llmapi `tensorrt_llm` model (TensorRT-LLM
triton_backend/all_models/llmapi/tensorrt_llm/config.pbtxt@c8c6df0, and @0a71057 for the newer inputs): the same in the
GPU repository (NVIDIA's model.py) and in the CPU rehearsal (specbuild's model.py)."""

from __future__ import annotations

from specbuild.repository.engine.tensors import Tensor

S, B, I32, I64, U64, F32 = "TYPE_STRING", "TYPE_BOOL", "TYPE_INT32", "TYPE_INT64", "TYPE_UINT64", "TYPE_FP32"

# config.pbtxt@c8c6df0 (releases 1.0 - 1.2): every input optional except text_input
INPUTS: list[Tensor] = [
    Tensor("text_input", S, (-1,), optional=False),
    Tensor("streaming", B, (1,)),
    Tensor("sampling_param_best_of", I32, (1,)),
    Tensor("sampling_param_temperature", F32, (1,)),
    Tensor("sampling_param_top_k", I32, (1,)),
    Tensor("sampling_param_top_p", F32, (1,)),
    Tensor("sampling_param_frequency_penalty", F32, (1,)),
    Tensor("sampling_param_presence_penalty", F32, (1,)),
    Tensor("sampling_param_max_tokens", I32, (1,)),
    Tensor("sampling_param_stop", S, (-1,)),
    Tensor("sampling_param_seed", U64, (1,)),
    Tensor("sampling_param_exclude_input_from_output", B, (1,)),
    Tensor("sampling_param_return_perf_metrics", B, (1,)),
    Tensor("return_finish_reason", B, (1,)),
    Tensor("return_stop_reason", B, (1,)),
    Tensor("return_cumulative_logprob", B, (1,)),
    Tensor("stop", B, (1,)),
]
# config.pbtxt@0a71057 (2026 main; written for release 1.3): multimodal and LoRA inputs
NEW_INPUTS: list[Tensor] = [
    Tensor("image_url", S, (-1,)),
    Tensor("lora_id", U64, (1,)),
    Tensor("lora_name", S, (1,)),
    Tensor("lora_path", S, (1,)),
    Tensor("lora_ckpt_source", S, (1,)),
]
PERF_OUTPUTS: list[Tensor] = [
    Tensor("kv_cache_reused_block", I32, (-1,)),
    Tensor("kv_cache_hit_rate", F32, (-1,)),
    Tensor("kv_cache_alloc_new_blocks", I32, (-1,)),
    Tensor("kv_cache_alloc_total_blocks", I32, (-1,)),
    Tensor("kv_cache_missed_block", I32, (-1,)),
    Tensor("arrival_time_ns", I64, (1,)),
    Tensor("first_scheduled_time_ns", I64, (1,)),
    Tensor("first_token_time_ns", I64, (1,)),
    Tensor("last_token_time_ns", I64, (1,)),
    Tensor("acceptance_rate", F32, (1,)),
    Tensor("total_accepted_draft_tokens", I32, (1,)),
    Tensor("total_draft_tokens", I32, (1,)),
]
OUTPUTS: list[Tensor] = [
    Tensor("text_output", S, (-1,)),
    Tensor("finish_reason", S, (-1,)),
    Tensor("stop_reason", S, (-1,)),
    Tensor("cumulative_logprob", F32, (-1,)),
    *PERF_OUTPUTS,
]
SPECULATIVE_COUNTERS = ("acceptance_rate", "total_accepted_draft_tokens", "total_draft_tokens")


NEWEST = "1.3"  # the release whose template is config.pbtxt@0a71057: all 22 inputs


def inputs(release: str) -> list[Tensor]:
    """The inputs of NVIDIA's template for `release` (what NVIDIA's model.py of that release reads)."""
    return INPUTS + (NEW_INPUTS if release == NEWEST else [])
