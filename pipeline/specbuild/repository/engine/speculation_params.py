"""The engine-flavour Triton dialect of a `Speculation`: the `tensorrt_llm` model's decoding parameters and the
`tensorrt_llm_bls` drafting parameters (TensorRT-LLM triton_backend/all_models/inflight_batcher_llm/
tensorrt_llm/config.pbtxt@2a9abd95, tensorrt_llm_bls/1/lib/decode.py@4db6828). The C++ `tensorrtllm` backend and
specbuild's reference core read the same keys, so this is one translation for both runtimes; each method's part is
its pack's (`MethodPack.decoding_mode`, `core_parameters`, `bls_parameters`)."""

from __future__ import annotations

from specbuild.methods import METHODS, pack_for
from specbuild.speculation import Speculation
from specbuild.standalone import draft_len_schedule

# decoding_mode values that turn speculation on besides the packs' (a baseline must have none of them): the C++
# backend's other speculative modes (inflight_batcher_llm/tensorrt_llm/config.pbtxt@2a9abd95)
OTHER_SPECULATIVE_DECODING_MODES = frozenset({"redrafter", "explicit_draft_tokens"})
DRAFT_MODEL_NAME = "tensorrt_llm_draft"


def speculative_decoding_modes() -> frozenset[str]:
    """decoding_mode values that turn speculation on (the registered packs' and the backend's others)."""
    return frozenset(p.decoding_mode for p in METHODS.values() if p.decoding_mode) | OTHER_SPECULATIVE_DECODING_MODES


def core_parameters(spec: Speculation) -> dict[str, str]:
    """Method parameters of the target's `tensorrt_llm` config.pbtxt: the pack's decoding_mode, then
    `draft_len_schedule` (specbuild's; the reference core follows it, the recipe check refuses it where the C++
    backend would decode: the draft length per number of requests in flight, "1:4,4:2,8:0"), then the pack's keys.
    Methods the engine does not draft have none (the backend has no draft-tokens decoding_mode: tensorrtllm_backend
    inflight_batcher_llm/src/model_instance_state.cc@v0.19.0)."""
    pack = pack_for(spec)
    if pack.decoding_mode is None:
        return {}
    params = {"decoding_mode": pack.decoding_mode}
    if spec.draft_len_schedule:
        params[draft_len_schedule.PARAMETER] = draft_len_schedule.as_text(spec.draft_len_schedule)
    params.update(pack.core_parameters(spec))
    return params


def bls_drafts(spec: Speculation) -> bool:
    """Our BLS runs the speculative loop: draft, then a target call carrying draft_input_ids."""
    return pack_for(spec).bls_parameters(spec) is not None


def bls_parameters(spec: Speculation) -> dict[str, str]:
    """How our BLS drafts for a BLS-driven method (design contract "Triton repository"): the draft core model's
    name when there is one, the pack's parameters, and `draft_len_schedule`, which caps each round's drafts by the
    number of rows the BLS has in flight."""
    drafting = pack_for(spec).bls_parameters(spec)
    if drafting is None:
        return {}
    params = {"tensorrt_llm_draft_model_name": DRAFT_MODEL_NAME} if spec.has_draft_engine else {}
    params.update(drafting)
    if spec.draft_len_schedule:
        params[draft_len_schedule.PARAMETER] = draft_len_schedule.as_text(spec.draft_len_schedule)
    return params
