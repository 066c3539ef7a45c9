"""MTP's params: the target's own prediction layers a Speculation drafts with, and the relaxed acceptance asked for."""

from __future__ import annotations

from dataclasses import dataclass

from specbuild.methods.suffix_automaton.enhancer import SaOverride
from specbuild.speculation import MethodParams, Speculation

# TensorRT-LLM's defaults (tensorrt_llm/llmapi/llm_args.py MTPDecodingConfig): relaxed_topk 1, relaxed_delta 0.0, and
# DeepSeek-R1's <think> / </think> ids as the thinking phase's begin / end tokens
DEFAULT_TOP_K, DEFAULT_DELTA, DEFAULT_BEGIN, DEFAULT_END = 1, 0.0, 128798, 128799


@dataclass(frozen=True)
class RelaxedThinking:
    """Relaxed acceptance in the thinking phase (specbuild/methods/mtp/decoder.py has the rule): a draft is accepted
    when it is among the target's `top_k` tokens whose probability is at least the top one's minus `delta`, between
    the begin and end thinking tokens."""

    top_k: int = DEFAULT_TOP_K
    delta: float = DEFAULT_DELTA
    begin_token: int = DEFAULT_BEGIN
    end_token: int = DEFAULT_END


@dataclass(frozen=True)
class MtpLayers(MethodParams):
    """The target's own multi-token-prediction layers, drafting chains of `num_nextn_predict_layers` tokens (the
    draft length: TensorRT-LLM's name for it up to 1.2, max_draft_len from 1.3)."""

    num_nextn_predict_layers: int
    relaxed: RelaxedThinking | None = None
    sa: SaOverride | None = None  # sa_config: a suffix automaton's long matches override the MTP layers' drafts

    def full_length(self, spec: Speculation) -> int | None:
        return self.num_nextn_predict_layers

    def not_lossless(self) -> str | None:
        if self.relaxed is None:
            return None
        return (
            "relaxed acceptance in the thinking phase accepts a draft that is among the target's top "
            f"{self.relaxed.top_k} tokens within {self.relaxed.delta} of the top one's probability, not only its "
            "greedy choice, so between the begin and end thinking tokens the output may differ from the baseline's "
            "by design (TensorRT-LLM use_relaxed_acceptance_for_thinking)"
        )
