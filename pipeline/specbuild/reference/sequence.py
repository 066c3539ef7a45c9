"""A request being decoded: its tokens, random stream, stop conditions and counters.

Methods read a sequence through a few verbs: `tokens` (prompt + output so far; the last one is not yet in any
KV cache), `probs`/`choose` (target or draft logits -> the request's distribution / next token, bad words
masked given the context), and `draft_budget` (how many drafts are worth proposing).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence as Seq

import torch

from specbuild.reference import sampling
from specbuild.reference.request import FinishReason, Request, RequestStats


@dataclass
class Sequence:
    request_id: int
    request: Request
    tokens: list[int]
    prompt_len: int
    generator: torch.Generator
    stats: RequestStats = field(default_factory=RequestStats)
    state: dict = field(default_factory=dict)  # method-private per-sequence state (e.g. last hidden state)
    finish_reason: FinishReason | None = None

    @classmethod
    def start(cls, request_id: int, request: Request) -> "Sequence":
        gen = torch.Generator()
        gen.manual_seed(request.sampling.seed if request.sampling.seed is not None else 0)
        ids = list(request.input_ids)
        return cls(request_id, request, ids, len(ids), gen)

    # ------------------------------------------------------------------ reading
    @property
    def sampling(self) -> sampling.SamplingConfig:
        return self.request.sampling

    @property
    def greedy(self) -> bool:
        return self.request.sampling.greedy

    @property
    def output(self) -> list[int]:
        return self.tokens[self.prompt_len :]

    @property
    def remaining(self) -> int:
        return self.request.max_new_tokens - len(self.output)

    def draft_budget(self, max_draft: int) -> int:
        """Drafts worth proposing this step: a step yields at most drafts + 1 tokens, so never more than
        `remaining - 1`."""
        return max(0, min(max_draft, self.remaining - 1))

    # ------------------------------------------------------------------ distributions
    def banned_tokens(self, extra: Seq[int] = ()) -> list[int]:
        """Tokens that would complete a bad word after the context tokens + extra."""
        context = self.tokens + list(extra)
        banned = []
        for word in self.request.bad_words:
            *prefix, last = word
            if not prefix or context[len(context) - len(prefix) :] == prefix:
                banned.append(last)
        return banned

    def mask_bad_words(self, logits: torch.Tensor, extra: Seq[int] = ()) -> torch.Tensor:
        """logits [n, V] at n consecutive positions whose contexts are tokens + extra[:i]: tokens that would
        complete a bad word get -inf."""
        if not self.request.bad_words:
            return logits
        logits = logits.clone()
        for i in range(logits.shape[0]):
            banned = self.banned_tokens(extra[:i])
            if banned:
                logits[i, banned] = float("-inf")
        return logits

    def probs(self, logits: torch.Tensor, extra: Seq[int] = ()) -> torch.Tensor:
        """The request's distributions [n, V] at n consecutive positions (contexts tokens + extra[:i])."""
        return sampling.probabilities(self.mask_bad_words(logits, extra), self.sampling)

    def distribution(self, logits: torch.Tensor, extra: Seq[int] = ()) -> torch.Tensor:
        """The request's distribution [V] of the token after tokens + extra, from that position's logits [V]."""
        return sampling.probabilities(self._mask_one(logits, extra), self.sampling)

    def choose(self, logits: torch.Tensor, extra: Seq[int] = ()) -> int:
        """Next token after tokens + extra from that position's logits [V]: argmax if greedy, else a sample."""
        logits = self._mask_one(logits, extra)
        if self.greedy:
            return int(logits.argmax())
        return sampling.sample(sampling.probabilities(logits, self.sampling), self.generator)

    def _mask_one(self, logits: torch.Tensor, extra: Seq[int]) -> torch.Tensor:
        if self.request.bad_words:
            banned = self.banned_tokens(extra)
            if banned:
                logits = logits.clone()
                logits[banned] = float("-inf")
        return logits

    # ------------------------------------------------------------------ appending (executor only)
    def append(self, new_tokens: Seq[int]) -> list[int]:
        """Append tokens one at a time, stopping at the first stop condition. Returns what was emitted
        (the end id is not emitted) and sets `finish_reason` when the sequence is done."""
        emitted: list[int] = []
        req = self.request
        for tok in new_tokens:
            if req.end_id is not None and tok == req.end_id:
                self.finish_reason = "end_id"
                break
            self.tokens.append(tok)
            emitted.append(tok)
            if any(w and self.tokens[-len(w) :] == list(w) for w in req.stop_words):
                self.finish_reason = "stop_words"
                break
            if self.remaining <= 0:
                self.finish_reason = "length"
                break
        return emitted
