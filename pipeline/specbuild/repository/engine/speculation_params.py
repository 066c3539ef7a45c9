"""The engine-flavour Triton dialect of a `Speculation`: the `tensorrt_llm` model's decoding parameters and the
`tensorrt_llm_bls` drafting parameters (TensorRT-LLM triton_backend/all_models/inflight_batcher_llm/
tensorrt_llm/config.pbtxt@2a9abd95, tensorrt_llm_bls/1/lib/decode.py@4db6828). The C++ `tensorrtllm` backend and
specbuild's reference core read the same keys, so this is one translation for both runtimes."""

from __future__ import annotations

from specbuild.standalone import draft_len_schedule
from specbuild.engine_facts import SpecMode
from specbuild.speculation import DynamicTree, Speculation, StaticTree
from specbuild.trees import format_choices

# decoding_mode parameter per engine mode (inflight_batcher_llm/tensorrt_llm/config.pbtxt@2a9abd95); modes not
# listed leave it unset (the backend has no draft-tokens decoding_mode: tensorrtllm_backend
# inflight_batcher_llm/src/model_instance_state.cc@v0.19.0).
DECODING_MODES = {SpecMode.MEDUSA: "medusa", SpecMode.EAGLE: "eagle", SpecMode.LOOKAHEAD_DECODING: "lookahead"}
# decoding_mode values that turn speculation on (a baseline must have none of them)
SPECULATIVE_DECODING_MODES = frozenset({*DECODING_MODES.values(), "redrafter", "explicit_draft_tokens"})
DRAFT_MODEL_NAME = "tensorrt_llm_draft"


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
    if isinstance(spec.tree, StaticTree):
        params[f"{mode}_choices"] = format_choices(spec.tree.as_lists())
    elif isinstance(spec.tree, DynamicTree):  # EAGLE-2 (reference runtime only: refused for tensorrt-llm)
        params.update(eagle_use_dynamic_tree="true", eagle_dynamic_tree_max_top_k=str(spec.tree.top_k))
    if spec.lookahead is not None:
        w = spec.lookahead
        params.update(lookahead_window_size=str(w.window_size), lookahead_ngram_size=str(w.ngram_size),
                      lookahead_verification_set_size=str(w.verification_set_size))
    return params


def bls_parameters(spec: Speculation) -> dict[str, str]:
    """How our BLS drafts for a BLS-driven method (design contract "Triton repository"); `draft_len_schedule`
    caps each round's drafts by the number of rows the BLS has in flight."""
    if spec.draft_model is not None:
        params = {"tensorrt_llm_draft_model_name": DRAFT_MODEL_NAME, "speculative_method": "draft_target",
                  "default_num_draft_tokens": str(spec.draft_model.num_draft_tokens),
                  "default_use_draft_logits": "true" if spec.draft_model.use_draft_logits else "false"}
    elif spec.prompt_lookup is not None:
        params = {"speculative_method": "prompt_lookup",
                  "default_num_draft_tokens": str(spec.prompt_lookup.num_draft_tokens),
                  "max_matching_ngram_size": str(spec.prompt_lookup.max_matching_ngram_size)}
    else:
        return {}
    if spec.draft_len_schedule:
        params[draft_len_schedule.PARAMETER] = draft_len_schedule.as_text(spec.draft_len_schedule)
    return params
