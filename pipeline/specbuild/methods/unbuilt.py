"""Speculative methods TensorRT-LLM has that specbuild refuses by name, with the reason and what to use instead
(`check` says it at speculation.method, exit code 2), rather than as an unknown name. From the llmapi sheet
(../shared/reference/trtllm-llmapi-newest.md §3, llm_args.py@0004396720054fd8e205cbf616f21f0b57c6b412)."""

from __future__ import annotations

_NO_HEAD = (
    "specbuild has no head format for its draft (no layout of the draft folder beyond the `dflash_config` its "
    "validator reads) and no trainer that makes one (the zoo, `specbuild adapt`), so it can neither check nor "
    "rehearse one"
)
UNBUILT: dict[str, str] = {
    "dflash": (
        "is TensorRT-LLM's DFlash (decoding_type DFlash, arXiv 2602.06036: a draft that cross-attends to the "
        f"target's hidden states of target_layer_ids and predicts K tokens in parallel from mask tokens): {_NO_HEAD} "
        "— use eagle3 (a head over fused target features) or pard (K drafts in one forward from mask tokens)"
    ),
    "dspark": (
        "is TensorRT-LLM's DSpark (decoding_type DSpark: DFlash plus block_size, markov_rank and markov_head_type): "
        f"{_NO_HEAD} — use eagle3 (a head over fused target features) or pard (K drafts in one forward from mask "
        "tokens)"
    ),
}


def unbuilt_reason(method: object) -> str | None:
    """Why `method` (a speculation.method value) is refused by name, or None when it is not one of these."""
    if not isinstance(method, str):
        return None
    return UNBUILT.get(method.strip().lower().replace("-", "").replace("_", ""))
