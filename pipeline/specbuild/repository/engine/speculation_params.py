"""The engine-flavour Triton dialect of a `Speculation`: the `tensorrt_llm` model's decoding parameters and the
`tensorrt_llm_bls` drafting parameters (TensorRT-LLM triton_backend/all_models/inflight_batcher_llm/
tensorrt_llm/config.pbtxt@2a9abd95, tensorrt_llm_bls/1/lib/decode.py@4db6828). The C++ `tensorrtllm` backend and
specbuild's reference core read the same keys, so this is one translation for both runtimes."""

from __future__ import annotations

from typing import Any, Callable

from specbuild.standalone import draft_len_schedule
from specbuild.facts.engine_facts import SpecMode
from specbuild.speculation import (
    DraftModel,
    DynamicTree,
    EagleHead,
    LookaheadWindow,
    MedusaHeads,
    PromptLookup,
    Speculation,
    StaticTree,
)
from specbuild.facts.trees import format_choices

# decoding_mode parameter per engine mode (inflight_batcher_llm/tensorrt_llm/config.pbtxt@2a9abd95); modes not
# listed leave it unset (the backend has no draft-tokens decoding_mode: tensorrtllm_backend
# inflight_batcher_llm/src/model_instance_state.cc@v0.19.0).
DECODING_MODES = {SpecMode.MEDUSA: "medusa", SpecMode.EAGLE: "eagle", SpecMode.LOOKAHEAD_DECODING: "lookahead"}
# decoding_mode values that turn speculation on (a baseline must have none of them)
SPECULATIVE_DECODING_MODES = frozenset({*DECODING_MODES.values(), "redrafter", "explicit_draft_tokens"})
DRAFT_MODEL_NAME = "tensorrt_llm_draft"


def _tree(spec: Speculation, mode: str) -> dict[str, str]:
    if isinstance(spec.tree, StaticTree):
        return {f"{mode}_choices": format_choices(spec.tree.as_lists())}
    if isinstance(spec.tree, DynamicTree):  # EAGLE-2 (reference runtime only: refused for tensorrt-llm)
        return {"eagle_use_dynamic_tree": "true", "eagle_dynamic_tree_max_top_k": str(spec.tree.top_k)}
    return {}


def _lookahead(spec: Speculation, mode: str) -> dict[str, str]:
    w = spec.params
    return {
        "lookahead_window_size": str(w.window_size),
        "lookahead_ngram_size": str(w.ngram_size),
        "lookahead_verification_set_size": str(w.verification_set_size),
    }


# The `tensorrt_llm` model's method parameters after decoding_mode (and draft_len_schedule), per method drafted
# inside the engine (by params type). The BLS-driven methods have none: their parameters are the BLS's.
CORE: dict[type, Callable[[Speculation, str], dict[str, str]]] = {
    MedusaHeads: _tree,
    EagleHead: _tree,
    LookaheadWindow: _lookahead,
}


def core_parameters(spec: Speculation) -> dict[str, str]:
    """Method parameters of the target's `tensorrt_llm` config.pbtxt. `draft_len_schedule` (specbuild's; the
    reference core follows it, the recipe check refuses it where the C++ backend would decode): the draft length
    per number of requests in flight, "1:4,4:2,8:0"."""
    mode = DECODING_MODES.get(spec.mode)
    if mode is None:
        return {}
    params = {"decoding_mode": mode}
    if spec.draft_len_schedule:
        params[draft_len_schedule.PARAMETER] = draft_len_schedule.as_text(spec.draft_len_schedule)
    translate = CORE.get(type(spec.params))
    if translate is not None:
        params.update(translate(spec, mode))
    return params


def _draft_target(draft: DraftModel) -> dict[str, str]:
    return {
        "tensorrt_llm_draft_model_name": DRAFT_MODEL_NAME,
        "speculative_method": "draft_target",
        "default_num_draft_tokens": str(draft.num_draft_tokens),
        "default_use_draft_logits": "true" if draft.use_draft_logits else "false",
    }


def _prompt_lookup(drafts: PromptLookup) -> dict[str, str]:
    return {
        "speculative_method": "prompt_lookup",
        "default_num_draft_tokens": str(drafts.num_draft_tokens),
        "max_matching_ngram_size": str(drafts.max_matching_ngram_size),
    }


# How our BLS drafts, per BLS-driven method (by params type; Speculation.drafted_by_bls).
BLS: dict[type, Callable[[Any], dict[str, str]]] = {DraftModel: _draft_target, PromptLookup: _prompt_lookup}


def bls_parameters(spec: Speculation) -> dict[str, str]:
    """How our BLS drafts for a BLS-driven method (design contract "Triton repository"); `draft_len_schedule`
    caps each round's drafts by the number of rows the BLS has in flight."""
    drafting = BLS.get(type(spec.params))
    if drafting is None:
        return {}
    params = drafting(spec.params)
    if spec.draft_len_schedule:
        params[draft_len_schedule.PARAMETER] = draft_len_schedule.as_text(spec.draft_len_schedule)
    return params
