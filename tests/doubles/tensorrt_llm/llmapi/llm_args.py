"""Double of tensorrt_llm.llmapi.llm_args: the LLM arguments a model.yaml may carry, per release, with the
validators that matter for speculative decoding, as read in NVIDIA/TensorRT-LLM tensorrt_llm/llmapi/llm_args.py
(copies of the 1.0/1.1 era and of main after 1.3.0rc3; docs/source/release-notes.md@001eaec); unknown keys fail as
pydantic's extra="forbid" does (BaseLlmArgs.model_config, StrictBaseModel sub-configs). It validates; it computes
nothing.

The parse path follows upstream's per release line (see `line`): NVIDIA's llmapi model calls
`update_llm_args_with_extra_dict({}, yaml)` and then `LLM(**args)`; up to 1.3.0rc3 the first converts
speculative_config through `DecodingBaseConfig.from_dict` (a fixed map, `FROM_DICT_MAPS`), later releases leave it
to a pydantic union on decoding_type (`UNION_TAGS`)."""

from __future__ import annotations

from typing import Any

# TorchLlmArgs fields (llm_args.py of main after 1.3.0rc3). `backend` is a deprecated Literal in 1.2.
LLM_FIELDS = {
    "model",
    "tokenizer",
    "tokenizer_mode",
    "skip_tokenizer_init",
    "trust_remote_code",
    "tensor_parallel_size",
    "dtype",
    "revision",
    "tokenizer_revision",
    "pipeline_parallel_size",
    "context_parallel_size",
    "gpus_per_node",
    "moe_cluster_parallel_size",
    "moe_tensor_parallel_size",
    "moe_expert_parallel_size",
    "enable_attention_dp",
    "load_format",
    "enable_lora",
    "lora_config",
    "kv_cache_config",
    "enable_chunked_prefill",
    "guided_decoding_backend",
    "peft_cache_config",
    "scheduler_config",
    "speculative_config",
    "max_batch_size",
    "max_input_len",
    "max_seq_len",
    "max_beam_width",
    "max_num_tokens",
    "gather_generation_logits",
    "backend",
    "cuda_graph_config",
    "disable_overlap_scheduler",
    "moe_config",
    "attn_backend",
    "sampler_type",
    "return_perf_metrics",
    "enable_iter_perf_stats",
    "stream_interval",
    "mpi_session",
    "_mpi_session",
}
KV_CACHE_FIELDS = {
    "free_gpu_memory_fraction",
    "enable_block_reuse",
    "max_tokens",
    "tokens_per_block",
    "dtype",
    "enable_partial_reuse",
    "host_cache_size",
    "max_attention_window",
}
CUDA_GRAPH_FIELDS = {"batch_sizes", "max_batch_size", "enable_padding"}  # 1.0 renamed padding_enabled (release notes)

# --- the parse path of speculative_config, per release line ------------------------------------------------------
# tensorrt_llm/llmapi/llm_args.py, update_llm_args_with_extra_dict -> DecodingBaseConfig.from_dict: the keys of the
# fixed map, as each source has them; any other decoding_type raises ValueError("Invalid decoding type: <t>").
FROM_DICT_MAPS: dict[str, frozenset[str]] = {
    # llm_args.py of the 1.0 era (DecodingBaseConfig.from_dict; DraftTargetDecodingConfig's own ClassVar says
    # "Draft_Target", but the map's key is "DraftTarget")
    "1.0": frozenset({"MTP", "Medusa", "Eagle", "Lookahead", "NGram", "DraftTarget", "UserProvided", "AUTO"}),
    # llm_args.py of the 1.1 era: 1.0's map plus "SaveState"
    "1.1": frozenset(
        {"MTP", "Medusa", "Eagle", "Lookahead", "NGram", "DraftTarget", "SaveState", "UserProvided", "AUTO"}
    ),
    # a 1.3.0rc3 tree (llm_args.py ~line 770): still from_dict; the keys read there ("Eagle, Eagle3,
    # DraftTarget, NGram, MTP, ..."; the rest of that map was not read, so not accepted here)
    "1.3.0rc3": frozenset({"Eagle", "Eagle3", "DraftTarget", "NGram", "MTP"}),
}
# 1.2.x: its llm_args.py was not read. The double accepts only what both neighbours accept, so that it refuses
# every spelling whose acceptance at 1.2 is unknown.
FROM_DICT_MAPS["1.2"] = FROM_DICT_MAPS["1.1"] & FROM_DICT_MAPS["1.3.0rc3"]
# llm_args.py of main after 1.3.0rc3 (imports as in the 1.3.0rc7 docs' source; the API reference of 1.3.0rc27 shows
# every config with a decoding_type Literal): SpeculativeConfig = Annotated[Union[DraftTargetDecodingConfig,
# EagleDecodingConfig, Eagle3DecodingConfig, LookaheadDecodingConfig, MedusaDecodingConfig, MTPDecodingConfig,
# NGramDecodingConfig, UserProvidedDecodingConfig, SaveHiddenStatesDecodingConfig, PARDDecodingConfig,
# AutoDecodingConfig], Field(discriminator="decoding_type")], and update_llm_args_with_extra_dict leaves the dict
# to pydantic. The union's tags:
UNION_TAGS: frozenset[str] = frozenset(
    {
        "Draft_Target",
        "Eagle",
        "Eagle3",
        "Lookahead",
        "Medusa",
        "MTP",
        "NGram",
        "User_Provided",
        "SaveState",
        "PARD",
        "AUTO",
        # the llmapi sheet (../shared/reference/trtllm-llmapi-newest.md §1, llm_args.py@0004396): SA, DFlash, DSpark
        "SA",
        "DFlash",
        "DSpark",
    }
)
# Kept for the field rules below: which decoding types each release line knows at all.
DECODING_TYPES = {**{k: set(v) for k, v in FROM_DICT_MAPS.items()}, "1.3": set(UNION_TAGS)}


def line(version: str) -> str:
    """The release line whose rules a version follows: 1.0, 1.1, 1.2, 1.3.0rc3 (1.3.0rc0-rc3: still from_dict) or
    1.3 (the discriminated union; 1.3.0rc4-rc6 are not known and are taken as the union)."""
    import re

    m = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?(?:\.?rc(\d+))?", version)
    major, minor = int(m.group(1)), int(m.group(2))
    if (major, minor) == (1, 3) and m.group(4) is not None and int(m.group(4)) <= 3:
        return "1.3.0rc3"
    return f"{major}.{minor}"


def parse_path(line_: str) -> str:
    return "union" if line_ == "1.3" else "from_dict"


class DecodingConfig:
    """What DecodingBaseConfig.from_dict returns: the config class chosen by the map (kept as the dict)."""

    def __init__(self, decoding_type: str, fields: dict):
        self.decoding_type, self.fields = decoding_type, dict(fields)

    def as_dict(self) -> dict:
        return {"decoding_type": self.decoding_type, **self.fields}


class DecodingBaseConfig:
    @classmethod
    def from_dict(cls, data: dict, line_: str | None = None) -> DecodingConfig:
        import tensorrt_llm

        known = FROM_DICT_MAPS[line_ or line(tensorrt_llm.__version__)]
        decoding_type = data.get("decoding_type")
        if decoding_type not in known:
            raise ValueError(f"Invalid decoding type: {decoding_type}")
        return DecodingConfig(decoding_type, {k: v for k, v in data.items() if k != "decoding_type"})


def update_llm_args_with_extra_dict(llm_args: dict, llm_args_dict: dict, extra_llm_api_options=None) -> dict:
    """llm_args.py's update_llm_args_with_extra_dict, as far as speculative_config goes: from_dict releases turn it
    into a config object (raising on an unknown decoding_type); the union releases leave it to pydantic."""
    import tensorrt_llm
    from tensorrt_llm._double import log_call

    log_call("update_llm_args_with_extra_dict", {"llm_args": llm_args, "llm_args_dict": llm_args_dict})
    llm_args_dict = dict(llm_args_dict)
    spec = llm_args_dict.get("speculative_config")
    line_ = line(tensorrt_llm.__version__)
    if isinstance(spec, dict) and parse_path(line_) == "from_dict":
        llm_args_dict["speculative_config"] = DecodingBaseConfig.from_dict(dict(spec), line_)
    return dict(llm_args) | llm_args_dict


class TorchLlmArgs:
    """The LLM argument class: constructing it validates (pydantic raises one ValidationError listing the
    problems)."""

    def __init__(self, **kwargs):
        import tensorrt_llm
        from tensorrt_llm._double import log_call

        log_call("TorchLlmArgs", kwargs)
        problems = validate(kwargs, line(tensorrt_llm.__version__))
        if problems:
            raise ValueError(
                f"{len(problems)} validation error(s) for TorchLlmArgs (TensorRT-LLM "
                f"{tensorrt_llm.__version__} test double): " + "; ".join(problems)
            )
        self.kwargs = kwargs

    @classmethod
    def from_kwargs(cls, **kwargs) -> "TorchLlmArgs":
        return cls(**kwargs)


_COMMON_OLD = {"max_draft_len", "speculative_model_dir", "max_concurrency", "load_format"}
_COMMON_12 = {
    "max_draft_len",
    "max_total_draft_tokens",
    "speculative_model",
    "speculative_model_dir",
    "max_concurrency",
    "draft_len_schedule",
    "load_format",
    "acceptance_window",
    "acceptance_length_threshold",
    "allow_advanced_sampling",
}
_COMMON_13 = (_COMMON_12 - {"acceptance_window", "acceptance_length_threshold"}) | {
    "acceptance_rate_window_size",
    "acceptance_rate_threshold",
    "use_rejection_sampling",
}  # PR #12905
_EAGLE = {
    "eagle_choices",
    "greedy_sampling",
    "posterior_threshold",
    "use_dynamic_tree",
    "dynamic_tree_max_topK",
    "num_eagle_layers",
    "max_non_leaves_per_layer",
    "eagle3_one_model",
}
_NGRAM = {"max_matching_ngram_size", "is_keep_all", "is_use_oldest", "is_public_pool"}
_MTP = {
    "num_nextn_predict_layers",
    "use_relaxed_acceptance_for_thinking",
    "relaxed_topk",
    "relaxed_delta",
    "use_mtp_vanilla",
    "mtp_eagle_one_model",
    "begin_thinking_phase_token",
    "end_thinking_phase_token",
}


_ACCEPTANCE = {"acceptance_window", "acceptance_length_threshold"}  # 1.1 (llm_args.py of the 1.1 era)
# Fields of DecodingBaseConfig per line (StrictBaseModel: any other key is "Extra inputs are not permitted").
# 1.3.0rc3 takes the fields of main after it (the closest source read); 1.2 only what both neighbours have.
_COMMON = {
    "1.0": _COMMON_OLD,
    "1.1": _COMMON_OLD | _ACCEPTANCE,
    "1.2": (_COMMON_OLD | _ACCEPTANCE) & _COMMON_12,
    "1.3.0rc3": _COMMON_12,
    "1.3": _COMMON_13,
}
_EAGLE_EXTRA = {
    "1.0": _EAGLE,
    "1.1": _EAGLE | {"eagle3_layers_to_capture"},
    "1.2": _EAGLE | {"eagle3_layers_to_capture"},
    "1.3.0rc3": _EAGLE | {"eagle3_layers_to_capture", "eagle3_model_arch"},
    "1.3": _EAGLE | {"eagle3_layers_to_capture", "eagle3_model_arch"},
}
OLD_LINES = ("1.0", "1.1")  # no model validators on the decoding configs yet (llm_args.py of the 1.0/1.1 era)


# SaveHiddenStatesDecodingConfig (decoding_type "SaveState"; llm_args.py of the 1.1 era and of main): its own fields.
# output_directory is required; eagle3_layers_to_capture is a set of layer ids (-1: the final post-norm state).
_SAVE_STATE = {"output_directory", "write_interval", "file_prefix", "eagle3_layers_to_capture"}


# llm_args.py@0004396 (the llmapi sheet §3): SADecodingConfig's own fields; SAEnhancerConfig (`sa_config`: threshold,
# enable_global_pool) on Eagle3, MTP and PARD; PARD's mask_token_id; MTP's dynamic tree.
_SA = {"max_matching_ngram_size", "enable_global_pool", "global_pool_size"}
_SA_ENHANCER = {"threshold", "enable_global_pool"}
_WITH_SA_CONFIG = ("Eagle", "Eagle3", "MTP", "PARD")


def _fields(line_: str, decoding_type: str) -> set[str]:
    if line_ == "1.3":
        newest = {
            "SA": _SA,
            "PARD": {"mask_token_id"},
            "MTP": {"use_dynamic_tree", "dynamic_tree_max_topK"},
        }.get(decoding_type, set()) | ({"sa_config"} if decoding_type in _WITH_SA_CONFIG else set())
    else:
        newest = set()
    extra = newest | {
        "Eagle": _EAGLE_EXTRA[line_],
        "Eagle3": _EAGLE_EXTRA[line_],
        "DraftTarget": set(),
        "Draft_Target": set(),
        "NGram": _NGRAM | ({"is_auto_heuristic"} if line_ == "1.0" else set()),
        "MTP": _MTP,
        "SaveState": _SAVE_STATE,
    }.get(decoding_type, set())
    return _COMMON[line_] | extra


def validate_speculative_config(config: Any, line_: str) -> list[str]:
    """The decoding config's own validation, after the parse path chose its class."""
    if isinstance(config, DecodingConfig):
        config = config.as_dict()
    elif not isinstance(config, dict):
        return [f"speculative_config must be a mapping, got {type(config).__name__}"]
    elif parse_path(line_) == "from_dict":  # LLM(speculative_config=<dict>) directly: the same map decides
        try:
            config = DecodingBaseConfig.from_dict(dict(config), line_).as_dict()
        except ValueError as e:
            return [f"ValueError: {e}"]
    dtype = config.get("decoding_type")
    if parse_path(line_) == "union" and dtype not in UNION_TAGS:
        return [
            f"speculative_config: Input tag '{dtype}' found using 'decoding_type' does not match any of the "
            f"expected tags: {', '.join(repr(t) for t in sorted(UNION_TAGS))}"
        ]
    problems = [
        f"speculative_config.{k}: Extra inputs are not permitted"
        for k in config
        if k != "decoding_type" and k not in _fields(line_, dtype)
    ]
    draft_len = config.get("max_draft_len")
    if (
        dtype in ("Eagle3", "Eagle", "Draft_Target", "DraftTarget", "NGram")
        and line_ not in OLD_LINES
        and not (isinstance(draft_len, int) and draft_len > 0)
    ):
        problems.append(f"ValueError: max_draft_len must be > 0 for {dtype}")
    model_field = "speculative_model_dir" if line_ in ("1.0", "1.1", "1.2") else "speculative_model"
    if dtype in ("Eagle3", "Eagle", "Draft_Target", "DraftTarget"):
        if not (config.get(model_field) or config.get("speculative_model_dir")):
            problems.append(f"ValueError: Draft model must be provided for {dtype} ({model_field})")
    if dtype == "SaveState":
        if not config.get("output_directory"):
            problems.append("speculative_config.output_directory: Field required")
        layers = config.get("eagle3_layers_to_capture")
        if layers is not None and (not isinstance(layers, (list, set, tuple)) or not layers):
            problems.append("ValueError: eagle3_layers_to_capture must be non-empty if provided")
    if dtype == "NGram" and line_ not in OLD_LINES:
        n = config.get("max_matching_ngram_size", 2)
        if not (isinstance(n, int) and n > 0):
            problems.append("speculative_config.max_matching_ngram_size: Input should be greater than 0")
    if dtype == "SA":  # SADecodingConfig.validate_sa_config
        n = config.get("max_matching_ngram_size", -1)
        if not (isinstance(n, int) and (n == -1 or n > 0)):
            problems.append(
                f"ValueError: max_matching_ngram_size must be > 0 (fixed ngram) or -1 (longest match). Got {n}."
            )
    sa = config.get("sa_config")
    if sa is not None and "sa_config" in _fields(line_, dtype):  # SAEnhancerConfig (StrictBaseModel)
        if not isinstance(sa, dict):
            problems.append("speculative_config.sa_config: Input should be a valid dictionary")
        else:
            problems += [
                f"speculative_config.sa_config.{k}: Extra inputs are not permitted" for k in sa if k not in _SA_ENHANCER
            ]
            t = sa.get("threshold", 4)
            if not (isinstance(t, int) and not isinstance(t, bool) and t > 0):
                problems.append("speculative_config.sa_config.threshold: Input should be greater than 0")
    if config.get("eagle_choices") is not None and config.get("use_dynamic_tree"):
        problems.append("ValueError: eagle_choices and use_dynamic_tree cannot be used together")
    if config.get("use_dynamic_tree") and not (config.get("dynamic_tree_max_topK") or 0) > 0:
        problems.append("ValueError: dynamic_tree_max_topK must be > 0 with use_dynamic_tree")
    threshold = config.get("acceptance_rate_threshold")  # llm_args.py@0004396: Field(ge=0.0, le=1.0)
    if threshold is not None and not (isinstance(threshold, (int, float)) and 0.0 <= threshold <= 1.0):
        problems.append("speculative_config.acceptance_rate_threshold: Input should be in [0, 1]")
    window = config.get("acceptance_rate_window_size")  # NonNegativeInt
    if window is not None and not (isinstance(window, int) and window >= 0):
        problems.append("speculative_config.acceptance_rate_window_size: Input should be greater than or equal to 0")
    schedule = config.get("draft_len_schedule")
    if schedule is not None and "draft_len_schedule" in _COMMON[line_]:
        problems += _schedule_problems(schedule, draft_len, config.get("max_concurrency"), line_)
    return problems


def _schedule_problems(schedule: Any, draft_len: Any, max_concurrency: Any, release: str) -> list[str]:
    """llm_args.py of main after 1.3.0rc3: keys >= 1, values >= 0, key 1 maps to max_draft_len, values <=
    max_draft_len; later main: the smallest key maps to max_draft_len and max_concurrency is mutually exclusive with
    it."""
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
    if release == "1.3.0rc3" and (first[0] != 1 or first[1] != draft_len):
        out.append("draft_len_schedule must contain key 1 with schedule[1] == max_draft_len")
    if release == "1.3" and first[1] != draft_len:
        out.append("draft_len_schedule: the smallest batch size must map to max_draft_len")
    if release == "1.3" and max_concurrency is not None:
        out.append("max_concurrency and draft_len_schedule are mutually exclusive")
    return out


def validate(args: dict, release: str) -> list[str]:
    """Every problem TorchLlmArgs would raise for these arguments (release: a line, see `line`)."""
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
        problems += [
            f"cuda_graph_config.{k}: Extra inputs are not permitted" for k in graphs if k not in CUDA_GRAPH_FIELDS
        ]
    if args.get("speculative_config") is not None:
        # (speculation + pipeline parallelism is "No" in the feature matrix but no validator was seen:
        # docs/source/features/feature-combination-matrix.md@01edcea)
        problems += validate_speculative_config(args["speculative_config"], release)
    for key in ("tensor_parallel_size", "pipeline_parallel_size", "max_batch_size", "max_num_tokens"):
        if key in args and not (isinstance(args[key], int) and args[key] > 0):
            problems.append(f"{key}: Input should be a positive integer")
    return problems
