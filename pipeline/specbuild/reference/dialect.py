"""The reference runtime's dialect of the `tensorrt_llm` model's config.pbtxt parameters: the `specbuild.decoding`
keys an engine folder records (the target role's, specbuild.runtimes.roles; read by the method's decoder, its pack's
`decoder.py`) recovered from the C++ backend's parameter names (decoding_mode, medusa_choices, eagle_choices,
lookahead_*; and specbuild's draft_len_schedule, which the C++ backend does not have), which override the engine's
defaults at load time as they do for the C++ backend. Each method's keys are its pack's (`MethodPack.decoding`,
`decoding_overrides`)."""

from __future__ import annotations

from typing import Any, Callable

from specbuild.facts.engine_facts import SpecMode
from specbuild.methods import METHODS
from specbuild.methods.pack import ParameterProblem
from specbuild.standalone import draft_len_schedule


# decoding_mode values that pick plain sampling (the C++ backend's; nothing to override)
PLAIN_DECODING_MODES = frozenset({"top_k", "top_p", "top_k_top_p", "auto"})


def overrides(
    get: Callable[[str], str | None],
    get_bool: Callable[[str], bool | None],
    get_int: Callable[[str], int | None],
    engine_mode: SpecMode,
    engine_method: str,
) -> dict[str, Any]:
    """specbuild.decoding overrides from the tensorrt_llm parameters (`get*` read one parameter; None = unset).
    A speculative decoding_mode must be the one the engine was built with (its method's pack's)."""
    drafting = {p.decoding_mode: p for p in METHODS.values() if p.decoding_mode}
    mode = get("decoding_mode")
    if mode is not None:
        mode = mode.lower()
        if mode in drafting:
            if drafting[mode].name != engine_method or engine_mode == SpecMode.NONE:
                built = engine_method if engine_mode != SpecMode.NONE else "no speculation"
                raise ParameterProblem(
                    f"decoding_mode {mode} but the engine was built for {built} — set "
                    "decoding_mode to match the engine or leave it empty"
                )
        elif mode not in PLAIN_DECODING_MODES:
            allowed = ", ".join(sorted(PLAIN_DECODING_MODES | set(drafting)))
            raise ParameterProblem(
                f"decoding_mode {mode!r} is not supported by the reference runtime (use one of "
                f"{allowed}, or leave it empty)"
            )
    pack = METHODS.get(engine_method)
    out: dict[str, Any] = {}
    if pack is not None and engine_mode != SpecMode.NONE:
        out.update(pack.decoding_overrides(get, get_bool, get_int))
    text = get(draft_len_schedule.PARAMETER)
    if text is not None:
        try:
            out[draft_len_schedule.PARAMETER] = draft_len_schedule.as_text(draft_len_schedule.parse(text))
        except ValueError as e:
            raise ParameterProblem(
                f"{draft_len_schedule.PARAMETER} {text!r}: {e} — write it as '1:4,4:2,8:0' (batch size:draft length)"
            ) from None
    return out


__all__ = ["PLAIN_DECODING_MODES", "ParameterProblem", "overrides"]
