"""The tensors each Triton model declares, as data (the config.pbtxt of each model under TensorRT-LLM
triton_backend/all_models/inflight_batcher_llm/@2a9abd95, and tensorrtllm_backend's of v0.19.0).

Names follow the TensorRT-LLM release the repository targets: `min_tokens` / `seed` and the `return_num_*`
inputs and `num_*_tokens` outputs (TensorRT-LLM 0.20+ / 1.x), or with `legacy=True` the tensorrtllm_backend
<= 0.19 names `min_length` / `random_seed` without the `num_*` tensors. `tensorrt_llm` declares its release's
spelling only. The ensemble and the BLS declare upstream's whole request contract for that release, optional
tensors included (LoRA, guided decoding, prompt tables, decoder text, the BLS's multimodal inputs), and accept
both spellings of the minimum length (`min_tokens` and `min_length`: GenAI-Perf's TensorRT-LLM converter sends
`min_length` whatever the release): preprocessing folds them into OUT_MIN_TOKENS for the ensemble, the BLS
folds them itself, and `tensorrt_llm` receives its release's name.
"""

from __future__ import annotations

from dataclasses import dataclass

LOGITS_DTYPE = "TYPE_FP32"  # `${logits_datatype}`: draft_logits, context_logits, generation_logits
PROMPT_TABLE_DTYPE = "TYPE_FP16"  # `${prompt_embedding_table_data_type}` (fixed FP16 before 0.20)
ENCODER_FEATURES_DTYPE = "TYPE_FP16"  # `${encoder_input_features_data_type}`


@dataclass(frozen=True)
class Tensor:
    name: str
    dtype: str  # a model_config_pb2.DataType name, e.g. "TYPE_INT32"
    dims: tuple[int, ...]
    optional: bool = True
    reshape: bool = False  # reshape: { shape: [ ] } (scalar per request)
    ragged: bool = False  # allow_ragged_batch: true


def _scalar(name: str, dtype: str, optional: bool = True) -> Tensor:
    return Tensor(name, dtype, (1,), optional=optional, reshape=True)


def names(legacy: bool) -> dict[str, str]:
    """Spelling of the renamed tensors (tensorrt_llm/config.pbtxt of TensorRT-LLM@2a9abd95 vs
    tensorrtllm_backend@v0.19.0)."""
    return {"min_tokens": "min_length" if legacy else "min_tokens", "seed": "random_seed" if legacy else "seed"}


# --- tensorrt_llm (inflight_batcher_llm/tensorrt_llm/config.pbtxt@2a9abd95) --------------------------------------


def core_inputs(legacy: bool = False) -> list[Tensor]:
    n = names(legacy)
    i32, f32, b = "TYPE_INT32", "TYPE_FP32", "TYPE_BOOL"
    out = [
        Tensor("input_ids", i32, (-1,), ragged=True),
        Tensor("encoder_input_features", ENCODER_FEATURES_DTYPE, (-1, -1), ragged=True),
        _scalar("encoder_output_lengths", i32),
        _scalar("input_lengths", i32, optional=False),
        _scalar("request_output_len", i32, optional=False),
        _scalar("num_return_sequences", i32),
        Tensor("draft_input_ids", i32, (-1,), ragged=True),
        Tensor("decoder_input_ids", i32, (-1,), ragged=True),
        _scalar("decoder_input_lengths", i32),
        Tensor("draft_logits", LOGITS_DTYPE, (-1, -1), ragged=True),
        _scalar("draft_acceptance_threshold", f32),
        _scalar("end_id", i32),
        _scalar("pad_id", i32),
        Tensor("stop_words_list", i32, (2, -1), ragged=True),
        Tensor("bad_words_list", i32, (2, -1), ragged=True),
        Tensor("embedding_bias", f32, (-1,), ragged=True),
        _scalar("beam_width", i32),
        _scalar("temperature", f32),
        _scalar("runtime_top_k", i32),
        _scalar("runtime_top_p", f32),
        _scalar("runtime_top_p_min", f32),
        _scalar("runtime_top_p_decay", f32),
        _scalar("runtime_top_p_reset_ids", i32),
        _scalar("len_penalty", f32),
        _scalar("early_stopping", b),
        _scalar("repetition_penalty", f32),
        _scalar(n["min_tokens"], i32),
        _scalar("beam_search_diversity_rate", f32),
        _scalar("presence_penalty", f32),
        _scalar("frequency_penalty", f32),
        _scalar(n["seed"], "TYPE_UINT64"),
        _scalar("return_log_probs", b),
        _scalar("return_context_logits", b),
        _scalar("return_generation_logits", b),
        _scalar("return_perf_metrics", b),
    ]
    if not legacy:
        out += [_scalar("return_num_input_tokens", b), _scalar("return_num_output_tokens", b)]
    out += [
        _scalar("exclude_input_in_output", b),
        _scalar("stop", b),
        _scalar("streaming", b),
        Tensor("prompt_embedding_table", PROMPT_TABLE_DTYPE, (-1, -1), ragged=True),
        Tensor("prompt_table_extra_ids", "TYPE_UINT64", (-1,), ragged=True),
        _scalar("prompt_vocab_size", i32),
        Tensor("cross_attention_mask", b, (-1, -1), ragged=True),
        Tensor("mrope_rotary_cos_sin", f32, (-1,)),
        Tensor("mrope_position_deltas", "TYPE_INT64", (1,)),
        _scalar("lora_task_id", "TYPE_UINT64"),
        Tensor("lora_weights", "TYPE_FP16", (-1, -1), ragged=True),
        Tensor("lora_config", i32, (-1, 3), ragged=True),
        Tensor("context_phase_params", "TYPE_UINT8", (-1,), ragged=True),
        Tensor("skip_cross_attn_blocks", b, (1,), ragged=True),
        Tensor("retention_token_range_starts", i32, (-1,), ragged=True),
        Tensor("retention_token_range_ends", i32, (-1,), ragged=True),
        Tensor("retention_token_range_priorities", i32, (-1,), ragged=True),
        Tensor("retention_token_range_durations_ms", i32, (-1,), ragged=True),
        Tensor("retention_decode_priority", i32, (1,), ragged=True),
        Tensor("retention_decode_duration_ms", i32, (1,), ragged=True),
        Tensor("guided_decoding_guide_type", "TYPE_STRING", (1,), ragged=True),
        Tensor("guided_decoding_guide", "TYPE_STRING", (1,), ragged=True),
        Tensor("lookahead_window_size", i32, (1,), ragged=True),
        Tensor("lookahead_ngram_size", i32, (1,), ragged=True),
        Tensor("lookahead_verification_set_size", i32, (1,), ragged=True),
    ]
    return out


# Outputs filled when a request sets return_perf_metrics (inflight_batcher_llm/tensorrt_llm/config.pbtxt@2a9abd95).
PERF_OUTPUTS: list[Tensor] = [
    Tensor("kv_cache_alloc_new_blocks", "TYPE_INT32", (1,)),
    Tensor("kv_cache_reused_blocks", "TYPE_INT32", (1,)),
    Tensor("kv_cache_alloc_total_blocks", "TYPE_INT32", (1,)),
    Tensor("arrival_time_ns", "TYPE_INT64", (1,)),
    Tensor("first_scheduled_time_ns", "TYPE_INT64", (1,)),
    Tensor("first_token_time_ns", "TYPE_INT64", (1,)),
    Tensor("last_token_time_ns", "TYPE_INT64", (1,)),
    Tensor("acceptance_rate", "TYPE_FP32", (1,)),
    Tensor("total_accepted_draft_tokens", "TYPE_INT32", (1,)),
    Tensor("total_draft_tokens", "TYPE_INT32", (1,)),
]
NUM_TOKENS_OUTPUTS: list[Tensor] = [
    Tensor("num_input_tokens", "TYPE_INT32", (1,)),
    Tensor("num_output_tokens", "TYPE_INT32", (1,)),
]


def core_outputs(legacy: bool = False) -> list[Tensor]:
    out = [
        Tensor("output_ids", "TYPE_INT32", (-1, -1)),
        Tensor("sequence_length", "TYPE_INT32", (-1,)),
        Tensor("cum_log_probs", "TYPE_FP32", (-1,)),
        Tensor("output_log_probs", "TYPE_FP32", (-1, -1)),
        Tensor("context_logits", LOGITS_DTYPE, (-1, -1)),
        Tensor("generation_logits", LOGITS_DTYPE, (-1, -1, -1)),
        Tensor("batch_index", "TYPE_INT32", (1,)),
        Tensor("sequence_index", "TYPE_INT32", (1,)),
        Tensor("context_phase_params", "TYPE_UINT8", (-1,)),
        *PERF_OUTPUTS,
    ]
    return out if legacy else out + NUM_TOKENS_OUTPUTS


# --- preprocessing / postprocessing (tensorrtllm_backend all_models/inflight_batcher_llm/*/config.pbtxt@v0.19.0) -


def preprocessing_inputs(legacy: bool = False) -> list[Tensor]:
    """Upstream's preprocessing inputs (text, decoder text, the multimodal inputs it refuses in words, the prompt
    table extra id) plus specbuild's MIN_TOKENS / MIN_LENGTH fold of the two minimum-length spellings."""
    # QUERY and REQUEST_OUTPUT_LEN are required upstream; optional here (and text_input / max_tokens at the
    # ensemble) so that a request missing one reaches preprocessing, which refuses it in a sentence. Triton checks
    # required inputs only when no optional one is given; otherwise the ensemble cannot start its first step and
    # a decoupled ensemble then sends an empty, error-free final response (a request without max_tokens looked
    # answered).
    out = [
        Tensor("QUERY", "TYPE_STRING", (1,)),
        Tensor("DECODER_QUERY", "TYPE_STRING", (1,)),
        Tensor("IMAGE_BYTES", "TYPE_UINT8", (-1, -1, -1, -1)),
        Tensor("IMAGE_URL", "TYPE_STRING", (1,)),
        Tensor("VIDEO_BYTES", "TYPE_UINT8", (-1, -1, -1, -1)),
    ]
    if not legacy:
        out.append(Tensor("IMAGES", "TYPE_STRING", (-1,)))  # TL only (pixtral)
    return out + [
        Tensor("REQUEST_OUTPUT_LEN", "TYPE_INT32", (1,)),
        Tensor("BAD_WORDS_DICT", "TYPE_STRING", (-1,)),
        Tensor("STOP_WORDS_DICT", "TYPE_STRING", (-1,)),
        Tensor("EMBEDDING_BIAS_WORDS", "TYPE_STRING", (-1,)),
        Tensor("EMBEDDING_BIAS_WEIGHTS", "TYPE_FP32", (-1,)),
        Tensor("END_ID", "TYPE_INT32", (1,)),
        Tensor("PAD_ID", "TYPE_INT32", (1,)),
        Tensor("PROMPT_TABLE_EXTRA_ID", "TYPE_UINT64", (1,)),
        # specbuild: the ensemble's min_tokens and min_length, folded into OUT_MIN_TOKENS
        Tensor("MIN_TOKENS", "TYPE_INT32", (1,)),
        Tensor("MIN_LENGTH", "TYPE_INT32", (1,)),
    ]


PREPROCESSING_OUTPUTS: list[Tensor] = [
    Tensor("INPUT_ID", "TYPE_INT32", (-1,)),
    Tensor("REQUEST_INPUT_LEN", "TYPE_INT32", (1,)),
    # decoder-only models: [pad id] and length 1, as upstream (the C++ backend reads them for encoder-decoder only)
    Tensor("DECODER_INPUT_ID", "TYPE_INT32", (-1,)),
    Tensor("REQUEST_DECODER_INPUT_LEN", "TYPE_INT32", (1,)),
    Tensor("BAD_WORDS_IDS", "TYPE_INT32", (2, -1)),
    Tensor("STOP_WORDS_IDS", "TYPE_INT32", (2, -1)),
    Tensor("EMBEDDING_BIAS", "TYPE_FP32", (-1,)),
    Tensor("REQUEST_OUTPUT_LEN", "TYPE_INT32", (-1,)),
    Tensor("OUT_END_ID", "TYPE_INT32", (1,)),
    Tensor("OUT_PAD_ID", "TYPE_INT32", (1,)),
    Tensor("OUT_PROMPT_TABLE_EXTRA_IDS", "TYPE_UINT64", (-1,)),  # only when PROMPT_TABLE_EXTRA_ID is given
    Tensor("OUT_MIN_TOKENS", "TYPE_INT32", (1,)),  # specbuild: only when MIN_TOKENS or MIN_LENGTH is given
]
POSTPROCESSING_INPUTS: list[Tensor] = [
    Tensor("TOKENS_BATCH", "TYPE_INT32", (-1, -1), optional=False),
    Tensor("SEQUENCE_LENGTH", "TYPE_INT32", (-1,), optional=False),
]
POSTPROCESSING_OUTPUTS: list[Tensor] = [
    Tensor("OUTPUT", "TYPE_STRING", (-1,)),  # rank 1 per request: [batch * beams], as upstream
    # specbuild: the token ids OUTPUT was decoded from, [beams, tokens], rows right-padded with -1.
    Tensor("OUTPUT_IDS", "TYPE_INT32", (-1, -1)),
]


# --- the external interface: ensemble (config.pbtxt@2a9abd95) and tensorrt_llm_bls (config.pbtxt@bff88ea) ------


def _interface_inputs(legacy: bool) -> list[tuple[Tensor, str, str]]:
    """(ensemble input, where it goes: "pre" or "core", name there)."""
    n = names(legacy)
    i32, f32, b, s = "TYPE_INT32", "TYPE_FP32", "TYPE_BOOL", "TYPE_STRING"
    rows = [
        (Tensor("text_input", s, (1,)), "pre", "QUERY"),  # required in words, by preprocessing (see above)
        (Tensor("decoder_text_input", s, (1,)), "pre", "DECODER_QUERY"),
        (Tensor("max_tokens", i32, (1,)), "pre", "REQUEST_OUTPUT_LEN"),
        (Tensor("num_return_sequences", i32, (1,)), "core", "num_return_sequences"),
        (Tensor("bad_words", s, (-1,)), "pre", "BAD_WORDS_DICT"),
        (Tensor("stop_words", s, (-1,)), "pre", "STOP_WORDS_DICT"),
        (Tensor("exclude_input_in_output", b, (1,)), "core", "exclude_input_in_output"),
        (Tensor("end_id", i32, (1,)), "pre", "END_ID"),
        (Tensor("pad_id", i32, (1,)), "pre", "PAD_ID"),
        (Tensor("top_k", i32, (1,)), "core", "runtime_top_k"),
        (Tensor("top_p", f32, (1,)), "core", "runtime_top_p"),
        (Tensor("temperature", f32, (1,)), "core", "temperature"),
        (Tensor("length_penalty", f32, (1,)), "core", "len_penalty"),
        (Tensor("repetition_penalty", f32, (1,)), "core", "repetition_penalty"),
        (Tensor("min_tokens", i32, (1,)), "pre", "MIN_TOKENS"),
        (Tensor("min_length", i32, (1,)), "pre", "MIN_LENGTH"),
        (Tensor("presence_penalty", f32, (1,)), "core", "presence_penalty"),
        (Tensor("frequency_penalty", f32, (1,)), "core", "frequency_penalty"),
        (Tensor(n["seed"], "TYPE_UINT64", (1,)), "core", n["seed"]),
        (Tensor("return_log_probs", b, (1,)), "core", "return_log_probs"),
        (Tensor("return_context_logits", b, (1,)), "core", "return_context_logits"),
        (Tensor("return_generation_logits", b, (1,)), "core", "return_generation_logits"),
        (Tensor("return_perf_metrics", b, (1,)), "core", "return_perf_metrics"),
    ]
    if not legacy:
        rows += [
            (Tensor("return_num_input_tokens", b, (1,)), "core", "return_num_input_tokens"),
            (Tensor("return_num_output_tokens", b, (1,)), "core", "return_num_output_tokens"),
        ]
    rows += [
        (Tensor("beam_width", i32, (1,)), "core", "beam_width"),
        (Tensor("stream", b, (1,)), "core", "streaming"),
        (Tensor("prompt_embedding_table", PROMPT_TABLE_DTYPE, (-1, -1)), "core", "prompt_embedding_table"),
        (Tensor("prompt_table_extra_id", "TYPE_UINT64", (1,)), "pre", "PROMPT_TABLE_EXTRA_ID"),
        (Tensor("prompt_vocab_size", i32, (1,)), "core", "prompt_vocab_size"),
        (Tensor("embedding_bias_words", s, (-1,)), "pre", "EMBEDDING_BIAS_WORDS"),
        (Tensor("embedding_bias_weights", f32, (-1,)), "pre", "EMBEDDING_BIAS_WEIGHTS"),
        (Tensor("lora_task_id", "TYPE_UINT64", (1,)), "core", "lora_task_id"),
        (Tensor("lora_weights", "TYPE_FP16", (-1, -1), ragged=True), "core", "lora_weights"),
        (Tensor("lora_config", i32, (-1, 3), ragged=True), "core", "lora_config"),
        (Tensor("guided_decoding_guide_type", s, (1,), ragged=True), "core", "guided_decoding_guide_type"),
        (Tensor("guided_decoding_guide", s, (1,), ragged=True), "core", "guided_decoding_guide"),
    ]
    return rows


def ensemble_routes(legacy: bool = False) -> list[tuple[Tensor, str, str]]:
    return _interface_inputs(legacy)


def ensemble_inputs(legacy: bool = False) -> list[Tensor]:
    return [t for t, _, _ in _interface_inputs(legacy)]


# preprocessing output -> (ensemble-internal tensor, tensorrt_llm input); the min-length name is the release's
def pre_to_core(legacy: bool = False) -> list[tuple[str, str, str]]:
    return [
        ("INPUT_ID", "_INPUT_ID", "input_ids"),
        ("REQUEST_INPUT_LEN", "_REQUEST_INPUT_LEN", "input_lengths"),
        ("DECODER_INPUT_ID", "_DECODER_INPUT_ID", "decoder_input_ids"),
        ("REQUEST_DECODER_INPUT_LEN", "_REQUEST_DECODER_INPUT_LEN", "decoder_input_lengths"),
        ("REQUEST_OUTPUT_LEN", "_REQUEST_OUTPUT_LEN", "request_output_len"),
        ("STOP_WORDS_IDS", "_STOP_WORDS_IDS", "stop_words_list"),
        ("BAD_WORDS_IDS", "_BAD_WORDS_IDS", "bad_words_list"),
        ("EMBEDDING_BIAS", "_EMBEDDING_BIAS", "embedding_bias"),
        ("OUT_END_ID", "_PREPROCESSOR_END_ID", "end_id"),
        ("OUT_PAD_ID", "_PREPROCESSOR_PAD_ID", "pad_id"),
        ("OUT_PROMPT_TABLE_EXTRA_IDS", "_OUT_PROMPT_TABLE_EXTRA_IDS", "prompt_table_extra_ids"),
        ("OUT_MIN_TOKENS", "_MIN_TOKENS", names(legacy)["min_tokens"]),
    ]


# specbuild: the generated token ids behind text_output ([beams, tokens], INT32, rows right-padded with -1).
OUTPUT_IDS = Tensor("output_ids", "TYPE_INT32", (-1, -1))


def passthrough_outputs(legacy: bool = False) -> list[Tensor]:
    """tensorrt_llm outputs the ensemble and the BLS hand back unchanged (each declared once)."""
    keep = ("cum_log_probs", "output_log_probs", "context_logits", "generation_logits", "batch_index", "sequence_index")
    core = {t.name: t for t in core_outputs(legacy)}
    out = [core[k] for k in keep] + PERF_OUTPUTS
    return out if legacy else out + NUM_TOKENS_OUTPUTS


def interface_outputs(legacy: bool = False) -> list[Tensor]:
    """text_output is rank 1 per request ([batch * beams]) as upstream's postprocessing returns it."""
    return [Tensor("text_output", "TYPE_STRING", (-1,)), OUTPUT_IDS, *passthrough_outputs(legacy)]


# The BLS's multimodal inputs (tensorrt_llm_bls/config.pbtxt@bff88ea): declared so that a request carrying them is
# refused in words.
BLS_MULTIMODAL_INPUTS: list[Tensor] = [
    Tensor("image_input", "TYPE_FP16", (-1, 3, -1, -1)),
    Tensor("image_bytes_input", "TYPE_UINT8", (-1, -1, -1, -1)),
    Tensor("image_url_input", "TYPE_STRING", (1,)),
    Tensor("video_bytes_input", "TYPE_UINT8", (-1, -1, -1, -1)),
]


def bls_inputs(legacy: bool = False) -> list[Tensor]:
    """The ensemble's inputs, the multimodal ones and the draft-target ones (tensorrt_llm_bls/config.pbtxt@bff88ea). No
    reshape: our BLS reads [batch, 1] tensors."""
    return (
        ensemble_inputs(legacy)
        + BLS_MULTIMODAL_INPUTS
        + [
            Tensor("num_draft_tokens", "TYPE_INT32", (1,)),
            Tensor("use_draft_logits", "TYPE_BOOL", (1,)),
        ]
    )
