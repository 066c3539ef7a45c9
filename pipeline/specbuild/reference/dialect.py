"""The reference runtime's dialect of a `Speculation`: the `specbuild.decoding` keys its engine folder records
(read by the method implementations in reference/decoder/methods/), and the same keys recovered from the `tensorrt_llm`
model's config.pbtxt parameters (the C++ backend's names: decoding_mode, medusa_choices, eagle_choices,
lookahead_*; and specbuild's draft_len_schedule, which the C++ backend does not have), which override the engine's defaults at load time as they do for the C++ backend."""

from __future__ import annotations

import json
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

LOOKAHEAD_KEYS = ("lookahead_window_size", "lookahead_ngram_size", "lookahead_verification_set_size")


def _medusa(spec: Speculation, heads: MedusaHeads) -> dict[str, Any]:
    return {"medusa_choices": spec.tree.as_lists(), "num_medusa_heads": heads.num_heads}


def _eagle(spec: Speculation, head: EagleHead) -> dict[str, Any]:
    out: dict[str, Any] = {
        "num_eagle_layers": head.num_eagle_layers,
        "max_non_leaves_per_layer": head.max_non_leaves_per_layer,
    }
    if isinstance(spec.tree, DynamicTree):
        out.update(eagle_use_dynamic_tree=True, eagle_dynamic_tree_max_top_k=spec.tree.top_k)
    elif isinstance(spec.tree, StaticTree):
        out.update(eagle_choices=spec.tree.as_lists())
    return out


def _draft_model(spec: Speculation, draft: DraftModel) -> dict[str, Any]:
    return {"num_draft_tokens": draft.num_draft_tokens, "use_draft_logits": draft.use_draft_logits}


def _prompt_lookup(spec: Speculation, drafts: PromptLookup) -> dict[str, Any]:
    return {"max_draft_len": drafts.num_draft_tokens, "max_matching_ngram_size": drafts.max_matching_ngram_size}


def _lookahead(spec: Speculation, w: LookaheadWindow) -> dict[str, Any]:
    return dict(zip(LOOKAHEAD_KEYS, (w.window_size, w.ngram_size, w.verification_set_size)))


# The engine folder's decoding keys per method (by params type). Methods not here have no engine folder of the
# reference runtime: EAGLE-3 and MTP exist in the llm-api flavour only (repository/engine/flavour.py refuses them).
DECODING: dict[type, Callable[[Speculation, Any], dict[str, Any]]] = {
    MedusaHeads: _medusa,
    EagleHead: _eagle,
    DraftModel: _draft_model,
    PromptLookup: _prompt_lookup,
    LookaheadWindow: _lookahead,
}


def decoding(spec: Speculation) -> dict[str, Any]:
    """Runtime defaults the target engine folder records under specbuild.decoding."""
    keys = DECODING.get(type(spec.params))
    out: dict[str, Any] = keys(spec, spec.params) if keys is not None else {}
    if spec.draft_len_schedule:  # the draft length per number of requests in flight (read by every method)
        out[draft_len_schedule.PARAMETER] = draft_len_schedule.as_text(spec.draft_len_schedule)
    return out


class ParameterProblem(ValueError):
    """A tensorrt_llm parameter the reference runtime cannot honour (the model refuses to load with it)."""


# decoding_mode values that pick plain sampling (the C++ backend's; nothing to override)
PLAIN_DECODING_MODES = frozenset({"top_k", "top_p", "top_k_top_p", "auto"})
SPECULATIVE_DECODING_MODES = {
    "medusa": SpecMode.MEDUSA,
    "eagle": SpecMode.EAGLE,
    "lookahead": SpecMode.LOOKAHEAD_DECODING,
}


def _choices(text: str) -> list[list[int]]:
    """`{0}, {0, 0}, {1}` (the C++ backend's format) -> [[0], [0, 0], [1]]."""
    try:
        value = json.loads("[" + text.replace("{", "[").replace("}", "]") + "]")
        return [[int(k) for k in path] for path in value]
    except (ValueError, TypeError):
        raise ParameterProblem(f"choices {text!r} are not in the '{{0}}, {{0, 0}}' format") from None


def overrides(
    get: Callable[[str], str | None],
    get_bool: Callable[[str], bool | None],
    get_int: Callable[[str], int | None],
    engine_mode: SpecMode,
    engine_method: str,
) -> dict[str, Any]:
    """specbuild.decoding overrides from the tensorrt_llm parameters (`get*` read one parameter; None = unset).
    A speculative decoding_mode must be the one the engine was built with."""
    mode = get("decoding_mode")
    if mode is not None:
        mode = mode.lower()
        if mode in SPECULATIVE_DECODING_MODES:
            if SPECULATIVE_DECODING_MODES[mode] != engine_mode:
                built = engine_method if engine_mode != SpecMode.NONE else "no speculation"
                raise ParameterProblem(
                    f"decoding_mode {mode} but the engine was built for {built} — set "
                    "decoding_mode to match the engine or leave it empty"
                )
        elif mode not in PLAIN_DECODING_MODES:
            allowed = ", ".join(sorted(PLAIN_DECODING_MODES | set(SPECULATIVE_DECODING_MODES)))
            raise ParameterProblem(
                f"decoding_mode {mode!r} is not supported by the reference runtime (use one of "
                f"{allowed}, or leave it empty)"
            )
    out: dict[str, Any] = {}
    if engine_mode == SpecMode.MEDUSA and get("medusa_choices"):
        out["medusa_choices"] = _choices(get("medusa_choices"))
    if engine_mode == SpecMode.EAGLE:
        if get("eagle_choices"):
            out["eagle_choices"] = _choices(get("eagle_choices"))
        if get("eagle_use_dynamic_tree") is not None:
            out["eagle_use_dynamic_tree"] = get_bool("eagle_use_dynamic_tree")
        if get("eagle_dynamic_tree_max_top_k") is not None:
            out["eagle_dynamic_tree_max_top_k"] = get_int("eagle_dynamic_tree_max_top_k")
    text = get(draft_len_schedule.PARAMETER)
    if text is not None:
        try:
            out[draft_len_schedule.PARAMETER] = draft_len_schedule.as_text(draft_len_schedule.parse(text))
        except ValueError as e:
            raise ParameterProblem(
                f"{draft_len_schedule.PARAMETER} {text!r}: {e} — write it as '1:4,4:2,8:0' (batch size:draft length)"
            ) from None
    if mode == "lookahead":
        values = {key: get_int(key) for key in LOOKAHEAD_KEYS}
        if any(v is None for v in values.values()):
            raise ParameterProblem(
                "decoding_mode is lookahead but lookahead parameters are not specified — set "
                + ", ".join(LOOKAHEAD_KEYS)
            )
        out.update(values)
    return out
