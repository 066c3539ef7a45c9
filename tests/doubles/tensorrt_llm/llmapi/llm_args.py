"""Double of tensorrt_llm.llmapi.llm_args: the LLM arguments a model.yaml may carry, per release, with the
validators that matter for speculative decoding. Written from /work/shared/reference/trtllm-llmapi-path.md
(§1.3, §1.4, §3.2, §3.4, §4); unknown keys fail as pydantic's extra="forbid" does (ARGS-1.2
BaseLlmArgs.model_config, StrictBaseModel sub-configs). It validates; it computes nothing."""

from __future__ import annotations

from typing import Any

# TorchLlmArgs fields (ARGS-1.2; §3.4 lists the ones specbuild writes). `backend` is a deprecated Literal in 1.2.
LLM_FIELDS = {
    "model", "tokenizer", "tokenizer_mode", "skip_tokenizer_init", "trust_remote_code", "tensor_parallel_size",
    "dtype", "revision", "tokenizer_revision", "pipeline_parallel_size", "context_parallel_size", "gpus_per_node",
    "moe_cluster_parallel_size", "moe_tensor_parallel_size", "moe_expert_parallel_size", "enable_attention_dp",
    "load_format", "enable_lora", "lora_config", "kv_cache_config", "enable_chunked_prefill",
    "guided_decoding_backend", "peft_cache_config", "scheduler_config", "speculative_config", "max_batch_size",
    "max_input_len", "max_seq_len", "max_beam_width", "max_num_tokens", "gather_generation_logits", "backend",
    "cuda_graph_config", "disable_overlap_scheduler", "moe_config", "attn_backend", "sampler_type",
    "return_perf_metrics", "enable_iter_perf_stats", "stream_interval", "mpi_session", "_mpi_session",
}
KV_CACHE_FIELDS = {"free_gpu_memory_fraction", "enable_block_reuse", "max_tokens", "tokens_per_block", "dtype",
                   "enable_partial_reuse", "host_cache_size", "max_attention_window"}
CUDA_GRAPH_FIELDS = {"batch_sizes", "max_batch_size", "enable_padding"}  # 1.0 renamed padding_enabled (§1.3)

# speculative_config: how each release names the decoding types (§1.4)
DECODING_TYPES = {
    "1.0": {"Eagle", "DraftTarget", "NGram", "MTP", "AUTO", "UserProvided"},
    "1.1": {"Eagle", "DraftTarget", "NGram", "MTP", "AUTO", "UserProvided", "SaveState"},
    "1.2": {"Eagle3", "Eagle", "Draft_Target", "NGram", "MTP", "AUTO", "User_Provided", "SaveState", "PARD"},
    "1.3": {"Eagle3", "Eagle", "Draft_Target", "NGram", "MTP", "AUTO", "User_Provided", "SaveState", "PARD",
            "SA", "DFlash", "DSpark"},
}
_COMMON_OLD = {"max_draft_len", "speculative_model_dir", "max_concurrency", "load_format"}
_COMMON_12 = {"max_draft_len", "max_total_draft_tokens", "speculative_model", "speculative_model_dir",
              "max_concurrency", "draft_len_schedule", "load_format", "acceptance_window",
              "acceptance_length_threshold", "allow_advanced_sampling"}
_COMMON_13 = (_COMMON_12 - {"acceptance_window", "acceptance_length_threshold"}) | {
    "acceptance_rate_window_size", "acceptance_rate_threshold", "use_rejection_sampling"}  # PR #12905
_EAGLE = {"eagle_choices", "greedy_sampling", "posterior_threshold", "use_dynamic_tree", "dynamic_tree_max_topK",
          "num_eagle_layers", "max_non_leaves_per_layer", "eagle3_one_model"}
_NGRAM = {"max_matching_ngram_size", "is_keep_all", "is_use_oldest", "is_public_pool"}
_MTP = {"num_nextn_predict_layers", "use_relaxed_acceptance_for_thinking", "relaxed_topk", "relaxed_delta",
        "use_mtp_vanilla", "mtp_eagle_one_model", "begin_thinking_phase_token", "end_thinking_phase_token"}


def _fields(release: str, decoding_type: str) -> set[str]:
    old = release in ("1.0", "1.1")
    common = _COMMON_OLD | ({"acceptance_window", "acceptance_length_threshold"} if release == "1.1" else set()) \
        if old else _COMMON_13 if release == "1.3" else _COMMON_12
    extra = {
        "Eagle": _EAGLE | ({"eagle3_layers_to_capture"} if release != "1.0" else set())
        | ({"eagle3_model_arch"} if not old else set()),
        "Eagle3": _EAGLE | {"eagle3_layers_to_capture", "eagle3_model_arch"},
        "DraftTarget": set(), "Draft_Target": set(),
        "NGram": _NGRAM | ({"is_auto_heuristic"} if release == "1.0" else set()),
        "MTP": _MTP,
    }.get(decoding_type, set())
    return common | extra


def validate_speculative_config(config: Any, release: str) -> list[str]:
    if not isinstance(config, dict):
        return [f"speculative_config must be a mapping, got {type(config).__name__}"]
    dtype = config.get("decoding_type")
    if dtype not in DECODING_TYPES[release]:
        if release in ("1.0", "1.1"):  # DecodingBaseConfig.from_dict's fixed map
            return [f"ValueError: Invalid decoding type: {dtype}"]
        return [f"speculative_config: Input tag '{dtype}' found using 'decoding_type' does not match any of the "
                f"expected tags: {', '.join(sorted(DECODING_TYPES[release]))}"]
    problems = [f"speculative_config.{k}: Extra inputs are not permitted"
                for k in config if k != "decoding_type" and k not in _fields(release, dtype)]
    draft_len = config.get("max_draft_len")
    if dtype in ("Eagle3", "Eagle", "Draft_Target", "DraftTarget", "NGram") and release not in ("1.0", "1.1") and \
            not (isinstance(draft_len, int) and draft_len > 0):
        problems.append(f"ValueError: max_draft_len must be > 0 for {dtype}")
    model_field = "speculative_model_dir" if release in ("1.0", "1.1") else "speculative_model"
    if dtype in ("Eagle3", "Eagle", "Draft_Target", "DraftTarget"):
        if not (config.get(model_field) or config.get("speculative_model_dir")):
            problems.append(f"ValueError: Draft model must be provided for {dtype} ({model_field})")
    if dtype == "NGram" and release not in ("1.0", "1.1"):
        n = config.get("max_matching_ngram_size", 2)
        if not (isinstance(n, int) and n > 0):
            problems.append("speculative_config.max_matching_ngram_size: Input should be greater than 0")
    if config.get("eagle_choices") is not None and config.get("use_dynamic_tree"):
        problems.append("ValueError: eagle_choices and use_dynamic_tree cannot be used together")
    if config.get("use_dynamic_tree") and not (config.get("dynamic_tree_max_topK") or 0) > 0:
        problems.append("ValueError: dynamic_tree_max_topK must be > 0 with use_dynamic_tree")
    schedule = config.get("draft_len_schedule")
    if schedule is not None:
        problems += _schedule_problems(schedule, draft_len, config.get("max_concurrency"), release)
    return problems


def _schedule_problems(schedule: Any, draft_len: Any, max_concurrency: Any, release: str) -> list[str]:
    """ARGS-1.2: keys >= 1, values >= 0, key 1 maps to max_draft_len, values <= max_draft_len; ARGS-NEW: the
    smallest key maps to max_draft_len and max_concurrency is mutually exclusive with it (§4.1)."""
    if not isinstance(schedule, dict) or not schedule:
        return ["speculative_config.draft_len_schedule must be a non-empty mapping batch size -> draft length"]
    try:
        items = sorted((int(k), int(v)) for k, v in schedule.items())
    except (TypeError, ValueError):
        return ["speculative_config.draft_len_schedule: keys and values must be integers"]
    out = []
    if any(k < 1 for k, _ in items) or any(v < 0 for _, v in items):
        out.append("draft_len_schedule: batch sizes must be >= 1 and draft lengths >= 0")
    if any(v > (draft_len or 0) for _, v in items):
        out.append("draft_len_schedule: draft lengths must be <= max_draft_len")
    first = items[0]
    if release == "1.2" and (first[0] != 1 or first[1] != draft_len):
        out.append("draft_len_schedule must contain key 1 with schedule[1] == max_draft_len")
    if release == "1.3" and first[1] != draft_len:
        out.append("draft_len_schedule: the smallest batch size must map to max_draft_len")
    if release == "1.3" and max_concurrency is not None:
        out.append("max_concurrency and draft_len_schedule are mutually exclusive")
    return out


def validate(args: dict, release: str) -> list[str]:
    """Every problem TorchLlmArgs (and update_llm_args_with_extra_dict) would raise for these arguments."""
    problems = [f"{k}: Extra inputs are not permitted" for k in args if k not in LLM_FIELDS]
    if "model" not in args:
        problems.append("model: Field required")
    if release == "1.3" and "backend" in args and args["backend"] != "pytorch":
        problems.append("backend: Input should be 'pytorch'")
    kv = args.get("kv_cache_config")
    if kv is not None:
        problems += [f"kv_cache_config.{k}: Extra inputs are not permitted" for k in kv if k not in KV_CACHE_FIELDS]
        fraction = kv.get("free_gpu_memory_fraction")
        if fraction is not None and not 0 < float(fraction) <= 1:
            problems.append("kv_cache_config.free_gpu_memory_fraction must be in (0, 1]")
    graphs = args.get("cuda_graph_config")
    if graphs is not None:
        problems += [f"cuda_graph_config.{k}: Extra inputs are not permitted" for k in graphs
                     if k not in CUDA_GRAPH_FIELDS]
    if args.get("speculative_config") is not None:
        # (speculation + pipeline parallelism is "No" in the feature matrix but no validator was seen: §4.7)
        problems += validate_speculative_config(args["speculative_config"], release)
    for key in ("tensor_parallel_size", "pipeline_parallel_size", "max_batch_size", "max_num_tokens"):
        if key in args and not (isinstance(args[key], int) and args[key] > 0):
            problems.append(f"{key}: Input should be a positive integer")
    return problems
