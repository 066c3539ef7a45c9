"""MTP's relaxed acceptance in the thinking phase (TensorRT-LLM `MTPDecodingConfig.use_relaxed_acceptance_for_thinking`):
NOT lossless — inside a reasoning model's thinking span a draft is accepted when it is *nearly* the target's choice.

The rule, as TensorRT-LLM implements it (`cpp/tensorrt_llm/kernels/speculativeDecoding/mtpKernels.cu`
@b35ac1b64368513d215c57d2ed01d62d910df8da `mtpRelaxedAcceptanceKernel`; its inputs from
`tensorrt_llm/_torch/speculative/mtp.py`@23ee85ee014dc8089415f2901ca8b7afa8d66f14 `MTPWorker.sample_and_accept_draft_tokens`
and `process_generation_logits`, `torch.topk(torch.softmax(logits), relaxed_topk)`):

    per request, a delta: relaxed_delta while in the thinking phase, 0 outside it
    for the drafts d_1..d_K in order, at target position i (its softmax *probabilities* p, their top-k values v_0 >= v_1
    >= ... and ids c_0, c_1, ...):
        threshold = v_0 - delta
        d_i is accepted when d_i == c_j for some j < relaxed_topk with j == 0 or v_j >= threshold
        (the scan over j stops at the first j > 0 with v_j < threshold); the first rejected draft ends the chain
    the new token after the accepted drafts is c_0 at that position (the target's argmax)
    then the accepted drafts and that token are scanned in order: begin_thinking_phase_token sets delta to
    relaxed_delta, end_thinking_phase_token sets it to 0 (the last one seen wins)
    a new request starts with delta = relaxed_delta when its prompt holds at least one begin_thinking_phase_token
    (the context phase counts begin tokens only: a prompt that also closes the span still starts relaxed), else 0

So delta is a margin in probability (not log-probability), relaxed_topk bounds how far down the ranking a draft may sit,
and with delta 0 (outside thinking) only the argmax or a token tied with it is accepted: greedy decoding up to ties.
Inside thinking the output is no longer the target's greedy output: an accepted draft may be the target's second
choice. Greedy requests only (TensorRT-LLM's MTP worker takes the argmax; sampled requests here verify losslessly).
Defaults (`tensorrt_llm/llmapi/llm_args.py` MTPDecodingConfig): relaxed_topk 1, relaxed_delta 0.0, tokens 128798 /
128799 (DeepSeek-R1's `<think>` / `</think>`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import torch

from specbuild.errors import UserError
from specbuild.reference.decoder.acceptance import Acceptance

SWITCH = "use_relaxed_acceptance_for_thinking"
DEFAULTS = {
    "relaxed_topk": 1,
    "relaxed_delta": 0.0,
    "begin_thinking_phase_token": 128798,
    "end_thinking_phase_token": 128799,
}
DELTA = "mtp_relaxed_delta"  # seq.state key: the request's current delta


def relaxed_accept(drafts: Sequence[int], probs: torch.Tensor, delta: float, top_k: int) -> Acceptance:
    """The relaxed rule on one chain: drafts d_1..d_K, the target's probabilities at the K+1 positions [K+1, V]."""
    values, ids = torch.topk(probs.float(), min(top_k, probs.shape[-1]), dim=-1)
    values, ids = values.tolist(), ids.tolist()
    accepted = 0
    while accepted < len(drafts):
        threshold = values[accepted][0] - delta
        hit = False
        for j, (value, token) in enumerate(zip(values[accepted], ids[accepted])):
            if j > 0 and threshold > value:
                break
            if drafts[accepted] == token:
                hit = True
                break
        if not hit:
            break
        accepted += 1
    return Acceptance(nodes=tuple(range(1, accepted + 1)), tokens=tuple(drafts[:accepted]), bonus=int(ids[accepted][0]))


@dataclass(frozen=True)
class RelaxedAcceptance:
    """The options of relaxed acceptance and the per-request thinking state it keeps in `seq.state`."""

    top_k: int
    delta: float
    begin: int
    end: int

    @classmethod
    def from_decoding(cls, decoding: Mapping, where: str, vocab_size: int) -> "RelaxedAcceptance | None":
        """The engine's decoding options (TensorRT-LLM's field names); None when relaxed acceptance is off."""
        if not _flag(decoding.get(SWITCH, False)):
            return None
        values = {k: decoding.get(k, default) for k, default in DEFAULTS.items()}
        try:
            top_k = int(values["relaxed_topk"])
            delta = float(values["relaxed_delta"])
            begin, end = int(values["begin_thinking_phase_token"]), int(values["end_thinking_phase_token"])
        except (TypeError, ValueError) as exc:
            raise UserError(f"{where}: relaxed acceptance options {values}: {exc}") from None
        if top_k < 1:
            raise UserError(f"{where}.relaxed_topk={top_k} must be >= 1 (TensorRT-LLM: a positive integer)")
        if not delta >= 0.0:
            raise UserError(
                f"{where}.relaxed_delta={delta} must be >= 0 (TensorRT-LLM: non-negative): a margin in probability "
                "below the target's top token"
            )
        for key, token in (("begin_thinking_phase_token", begin), ("end_thinking_phase_token", end)):
            if not 0 <= token < vocab_size:
                raise UserError(
                    f"{where}.{key}={token} is not a token id of the target (vocabulary of {vocab_size}): the "
                    "thinking phase would never be recognised — give the ids of the model's own begin/end "
                    "thinking tokens (DeepSeek-R1: <think> 128798, </think> 128799)"
                )
        return cls(top_k=top_k, delta=delta, begin=begin, end=end)

    def start(self, seq, prompt: Sequence[int]) -> None:
        """A new request: relaxed from the start when its prompt holds a begin token (TensorRT-LLM's context rule)."""
        seq.state[DELTA] = self.delta if self.begin in prompt else 0.0

    def observe(self, seq, new_tokens: Sequence[int]) -> None:
        """The tokens a step emitted, in order: a begin token opens the thinking phase, an end token closes it."""
        for token in new_tokens:
            if token == self.begin:
                seq.state[DELTA] = self.delta
            elif token == self.end:
                seq.state[DELTA] = 0.0

    def thinking(self, seq) -> bool:
        return seq.state.get(DELTA, 0.0) > 0.0

    def accept(self, seq, drafts: Sequence[int], logits: torch.Tensor) -> Acceptance:
        """One greedy row's chain verified by the relaxed rule with its current delta (logits: [K+1, V], already
        processed with the request's bad words / penalties where it has any)."""
        return relaxed_accept(drafts, torch.softmax(logits.float(), dim=-1), seq.state.get(DELTA, 0.0), self.top_k)


def _flag(value) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)
