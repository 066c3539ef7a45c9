"""The engines of the llm-api rehearsal, made in memory from model.yaml (no engine folder: TensorRT-LLM's LLM loads
the Hugging Face checkpoints itself, and so does this).

    settings = read_model_yaml(path)                     # specbuild.reference.llmapi_yaml
    target, draft = build_engines(settings)              # Engine objects the reference Executor runs
    executor = Executor(target, draft)

speculative_config -> reference method (TensorRT-LLM tensorrt_llm/llmapi/llm_args.py decoding configs):
    Draft_Target / DraftTarget   draft_target, the draft an in-process Engine, drafts = max_draft_len
    NGram                        prompt_lookup (max_draft_len, max_matching_ngram_size)
    Eagle3 / Eagle               eagle3 (the one-model chain, or the dynamic tree), head = speculative_model
    none                         autoregressive: the baseline
The engine's limits are the LLM's (max_batch_size, max_num_tokens, max_input_len, max_seq_len), carried by
`Engine.limits_override`; its build_config is what trtllm-build would record for them (engine_facts.built_limits),
so the executor sees the same speculative-decoding mode as with an engine folder.
"""

from __future__ import annotations

from dataclasses import replace

from specbuild.facts.engine_facts import EngineLimits, SpecMode, built_limits
from specbuild.methods import METHODS
from specbuild.reference.decoder.engine import Engine
from specbuild.reference.llmapi_yaml import LlmApiSettings, ModelYamlError
from specbuild.reference.decoder.methods import method_class
from specbuild.reference.decoder.model import CausalLM

COMPUTE_DTYPE = "float32"  # the reference runtime computes in float32 on the CPU


def method_available(method: str) -> bool:
    """The reference runtime has a decoder for `method` (its pack's, or autoregressive decoding for none)."""
    pack = METHODS.get(method)
    return pack is not None and (pack.decoder is not None or pack.Params is None)


def engine_mode(method: str) -> SpecMode:
    return method_class(method).engine_mode


def limits(settings: LlmApiSettings) -> EngineLimits:
    """The LLM's limits as an engine's: what trtllm-build would record for them, with the LLM's own token budget
    and draft length (the LLM takes max_num_tokens as given)."""
    built = built_limits(
        max_batch_size=settings.max_batch_size,
        max_input_len=settings.max_input_len,
        max_seq_len=settings.max_seq_len,
        max_num_tokens=settings.max_num_tokens,
        tokens_per_block=1,
        max_beam_width=1,
        mode=engine_mode(settings.method),
        max_draft_len=settings.max_draft_len,
    )
    return replace(built, max_num_tokens=settings.max_num_tokens, max_draft_len=settings.max_draft_len)


def _config(settings: LlmApiSettings, role: str, method: str, decoding: dict) -> dict:
    mode = engine_mode(method) if role == "target" else SpecMode.NONE
    built = built_limits(
        max_batch_size=settings.max_batch_size,
        max_input_len=settings.max_input_len,
        max_seq_len=settings.max_seq_len,
        max_num_tokens=settings.max_num_tokens,
        tokens_per_block=1,
        max_beam_width=1,
        mode=mode,
        max_draft_len=settings.max_draft_len if mode != SpecMode.NONE else 0,
    )
    return {
        "version": "specbuild-reference-llmapi",
        "build_config": built.as_build_config(),
        "pretrained_config": {},
        "specbuild": {
            "runtime": "reference",
            "role": role,
            "method": method,
            "decoding": decoding,
            "files": {},
            "model.yaml": str(settings.path),
        },
    }


def build_engines(settings: LlmApiSettings) -> tuple[Engine, Engine | None]:
    """The target engine (carrying the method) and the draft engine for draft_target. Loads the checkpoints."""
    if not method_available(settings.method):
        raise ModelYamlError(
            f"{settings.path}: speculative_config.decoding_type {settings.decoding_type}: the "
            f"reference runtime's {settings.method} method is not available in this specbuild "
            "(its pack has no decoder) — serve it with runtime: tensorrt-llm, or use "
            "Draft_Target or NGram on the CPU"
        )
    lim = limits(settings)
    folders = {"model": settings.model_dir, "tokenizer": settings.tokenizer_dir, **settings.weights}
    target = Engine(
        path=settings.model_dir,
        config=_config(settings, "target", settings.method, settings.decoding),
        decoding=dict(settings.decoding),
        folders=folders,
        model=CausalLM.from_pretrained(settings.model_dir, dtype=COMPUTE_DTYPE),
        compute_dtype=COMPUTE_DTYPE,
        limits_override=lim,
    )
    draft = None
    if settings.draft_dir is not None:
        draft = Engine(
            path=settings.draft_dir,
            config=_config(settings, "draft", settings.method, {}),
            decoding={},
            folders={"model": settings.draft_dir},
            model=CausalLM.from_pretrained(settings.draft_dir, dtype=COMPUTE_DTYPE),
            compute_dtype=COMPUTE_DTYPE,
            limits_override=lim,
        )
    return target, draft
