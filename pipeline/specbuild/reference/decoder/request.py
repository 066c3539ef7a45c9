"""What goes into the executor (Request) and what comes out (Event per step, Result at the end)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal

from specbuild.facts import metrics
from specbuild.reference.decoder.sampling import SamplingConfig, TokenLogProb

FinishReason = Literal["end_id", "length", "stop_words", "cancelled"]


@dataclass
class Request:
    """One generation request, in token ids.

    draft_tokens / draft_logits: externally drafted tokens (the Triton BLS path, TensorRT-LLM's
    `draft_input_ids` / `draft_logits`): verified in the request's first target forward; the request then yields
    the accepted tokens plus one. draft_logits, if given, is [len(draft_tokens), vocab] (nested lists or a
    tensor/array) and turns on probability-ratio acceptance; without it drafts are verified as deterministic
    proposals (token match when greedy, lossless rejection sampling otherwise).

    min_tokens: the end id is banned while fewer tokens than this were generated (TensorRT-LLM's min_tokens,
    `penaltyKernels.cu`: `currentStep - inputLen < minLength`); 0 = no minimum. return_log_probs: events and
    results carry each generated token's log probability (`sampling.TokenLogProb`) and the cumulative one.
    """

    input_ids: list[int]
    max_new_tokens: int
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    end_id: int | None = None
    pad_id: int | None = None
    stop_words: list[list[int]] = field(default_factory=list)
    bad_words: list[list[int]] = field(default_factory=list)
    draft_tokens: list[int] | None = None
    draft_logits: object | None = None
    min_tokens: int = 0
    return_log_probs: bool = False


@dataclass
class RequestStats:
    """Speculation counters of one request. A step is one verification (one target forward after prefill);
    an external-draft request's prefill is its first step."""

    total_draft_tokens: int = 0
    total_accepted_draft_tokens: int = 0
    steps: int = 0
    drafted_per_step: list[int] = field(default_factory=list)
    accepted_per_step: list[int] = field(default_factory=list)
    per_position_drafted: list[int] = field(default_factory=list)  # [i]: steps that proposed a draft at position i
    per_position_accepted: list[int] = field(default_factory=list)  # [i]: steps that accepted the draft at position i
    reused_prompt_tokens: int = 0  # KV reuse: prompt tokens whose KV came from a kept prefix (not prefilled)

    @property
    def acceptance_rate(self) -> float:
        return metrics.acceptance_rate(self.total_accepted_draft_tokens, self.total_draft_tokens)

    @property
    def mean_acceptance_length(self) -> float:
        return metrics.mean_acceptance_length(self.total_accepted_draft_tokens, self.steps)

    def record_step(self, drafted: int, accepted: int) -> None:
        if not 0 <= accepted <= drafted:
            raise ValueError(f"accepted={accepted} drafted={drafted}")
        self.steps += 1
        self.total_draft_tokens += drafted
        self.total_accepted_draft_tokens += accepted
        self.drafted_per_step.append(drafted)
        self.accepted_per_step.append(accepted)
        for counts, n in ((self.per_position_drafted, drafted), (self.per_position_accepted, accepted)):
            counts.extend([0] * (n - len(counts)))
            for i in range(n):
                counts[i] += 1

    def snapshot(self) -> "RequestStats":
        return replace(
            self,
            drafted_per_step=list(self.drafted_per_step),
            accepted_per_step=list(self.accepted_per_step),
            per_position_drafted=list(self.per_position_drafted),
            per_position_accepted=list(self.per_position_accepted),
        )

    def as_dict(self) -> dict:
        return {
            "total_draft_tokens": self.total_draft_tokens,
            "total_accepted_draft_tokens": self.total_accepted_draft_tokens,
            "acceptance_rate": self.acceptance_rate,
            "mean_acceptance_length": self.mean_acceptance_length,
            "steps": self.steps,
            "drafted_per_step": list(self.drafted_per_step),
            "accepted_per_step": list(self.accepted_per_step),
            "per_position_drafted": list(self.per_position_drafted),
            "per_position_accepted": list(self.per_position_accepted),
        }


@dataclass
class Event:
    """What one `Executor.step()` produced for one request."""

    request_id: int
    new_tokens: list[int]
    finished: bool
    finish_reason: FinishReason | None
    stats: RequestStats
    # with Request.return_log_probs: one per new token, and the cumulative log probability so far (TensorRT-LLM's
    # cum_log_probs: it also adds the end id's when the request ends there)
    log_probs: list[TokenLogProb] = field(default_factory=list)
    cum_log_prob: float = 0.0


@dataclass
class Result:
    """A finished request (from `Executor.run`)."""

    request_id: int
    output_ids: list[int]  # generated tokens only (the end id is not included)
    finish_reason: FinishReason
    stats: RequestStats
    log_probs: list[TokenLogProb] = field(default_factory=list)  # with Request.return_log_probs, per output id
    cum_log_prob: float = 0.0


def streams_now(iteration: int, stream_interval: int, finished: bool) -> bool:
    """Whether a streamed request is answered after its `iteration`-th decoding step (1-based): on its first, on
    every `stream_interval`-th and on its last — as TensorRT-LLM's PyExecutor creates streaming responses
    (tensorrt_llm/_torch/pyexecutor/py_executor.py `_handle_responses`: py_decoding_iter == 1, a multiple of
    stream_interval, or finished). Both reference cores follow it (one response per step at the default 1)."""
    return iteration == 1 or iteration % stream_interval == 0 or finished
