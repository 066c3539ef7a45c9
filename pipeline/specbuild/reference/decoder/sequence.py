"""A request being decoded: its tokens, random stream, stop conditions and counters.

Methods read a sequence through a few verbs: `tokens` (prompt + output so far; the last one is not yet in any
KV cache), `probs`/`distribution`/`choose` (target or draft logits -> the request's distribution / next token,
given the context: bad words, min_tokens, penalties), `token_log_probs` (the reported log probability of emitted
tokens), and `draft_budget` (how many drafts are worth proposing).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence as Seq

import torch

from specbuild.reference.decoder import sampling
from specbuild.reference.decoder.request import FinishReason, Request, RequestStats


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
    log_probs: list = field(default_factory=list)  # sampling.TokenLogProb per output token (Request.return_log_probs)
    cum_log_prob: float = 0.0
    _counts: tuple | None = field(default=None, repr=False)  # (len(tokens), occurrence counts) for the penalties

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
    # A position's distribution depends on its context (tokens + the draft tokens above it): bad words, the end id
    # while min_tokens is not reached, and the penalties (sampling.py: TensorRT-LLM's order and definitions).
    def banned_tokens(self, extra: Seq[int] = ()) -> list[int]:
        """Tokens banned after the context tokens + extra: those that would complete a bad word, and the end id
        while fewer than min_tokens tokens were generated."""
        context = self.tokens + list(extra)
        banned = []
        for word in self.request.bad_words:
            *prefix, last = word
            if not prefix or context[len(context) - len(prefix) :] == prefix:
                banned.append(last)
        if self._bans_end(len(extra)):
            banned.append(self.request.end_id)
        return banned

    def _bans_end(self, depth: int) -> bool:
        req = self.request
        return req.min_tokens > 0 and req.end_id is not None and len(self.output) + depth < req.min_tokens

    @property
    def context_dependent(self) -> bool:
        """True when some position's distribution depends on its context beyond the logits (bad words, penalties,
        or the end id still banned at this step's first position)."""
        return bool(self.request.bad_words) or self.sampling.penalized or self._bans_end(0)

    def token_counts(self, contexts: Seq[Seq[int]], vocab: int) -> torch.Tensor:
        """[n, vocab] occurrences of each token in tokens + contexts[i] (the penalties' counts)."""
        n = len(self.tokens)
        if self._counts is None or self._counts[0] != n or self._counts[1].shape[0] != vocab:
            counts = torch.bincount(torch.tensor(self.tokens, dtype=torch.long), minlength=vocab)[:vocab]
            self._counts = (n, counts.float())
        out = self._counts[1].repeat(len(contexts), 1)
        for i, extra in enumerate(contexts):
            if len(extra):
                out[i].index_add_(0, torch.tensor(list(extra), dtype=torch.long), torch.ones(len(extra)))
        return out

    def processed(self, logits: torch.Tensor, contexts: Seq[Seq[int]]) -> torch.Tensor:
        """Processed logits [n, V] (temperature, penalties, bans) at n positions; row i's context is
        tokens + contexts[i]."""
        logits = logits.float()
        if not self.context_dependent:
            return sampling.scale(logits, self.sampling)
        counts = self.token_counts(contexts, logits.shape[-1]) if self.sampling.penalized else None
        return sampling.processed_logits(self._masked(logits, contexts), self.sampling, counts)

    def _masked(self, logits: torch.Tensor, contexts: Seq[Seq[int]]) -> torch.Tensor:
        """logits [n, V] with row i's banned tokens (given context tokens + contexts[i]) at -inf."""
        if not self.request.bad_words and not self._bans_end(0):
            return logits
        masked = logits.clone()
        for i, extra in enumerate(contexts):
            banned = self.banned_tokens(extra)
            if banned:
                masked[i, banned] = float("-inf")
        return masked

    def mask_bad_words(self, logits: torch.Tensor, extra: Seq[int] = ()) -> torch.Tensor:
        """logits [n, V] at n consecutive positions whose contexts are tokens + extra[:i]: banned tokens (bad words,
        the end id before min_tokens) get -inf."""
        return self._masked(logits, [list(extra[:i]) for i in range(logits.shape[0])])

    def probs(self, logits: torch.Tensor, extra: Seq[int] = ()) -> torch.Tensor:
        """The request's distributions [n, V] at n consecutive positions (contexts tokens + extra[:i])."""
        contexts = [list(extra[:i]) for i in range(logits.shape[0])]
        return sampling.distribution(self.processed(logits, contexts), self.sampling)

    def distribution(self, logits: torch.Tensor, extra: Seq[int] = ()) -> torch.Tensor:
        """The request's distribution [V] of the token after tokens + extra, from that position's logits [V]."""
        return sampling.distribution(self.processed(logits[None], [extra])[0], self.sampling)

    def choose(self, logits: torch.Tensor, extra: Seq[int] = ()) -> int:
        """Next token after tokens + extra from that position's logits [V]: argmax if greedy, else a sample."""
        if self.greedy and not self.context_dependent:
            return int(logits.argmax())  # the argmax of the logits themselves (no rounding of a scale in between)
        processed = self.processed(logits[None], [extra])[0]
        if self.greedy:
            return int(processed.argmax())
        return sampling.sample(sampling.distribution(processed, self.sampling), self.generator)

    def token_log_probs(self, logits: torch.Tensor, tokens: Seq[int], contexts: Seq[Seq[int]]) -> list | None:
        """TokenLogProb of tokens[i] at a position with logits[i] and context tokens + contexts[i], when the request
        asks for log probs (else None)."""
        if not self.request.return_log_probs:
            return None
        processed = self.processed(logits, contexts)
        return [sampling.log_prob(processed[i], int(t), self.sampling) for i, t in enumerate(tokens)]

    # ------------------------------------------------------------------ appending (executor only)
    def append(self, new_tokens: Seq[int], log_probs: Seq[sampling.TokenLogProb] | None = None) -> list[int]:
        """Append tokens one at a time, stopping at the first stop condition. Returns what was emitted
        (the end id is not emitted) and sets `finish_reason` when the sequence is done. log_probs (one per new
        token) are kept for what is emitted; the end id's is added to the cumulative log probability, as
        TensorRT-LLM's sampling kernels add it before they mark the sequence finished."""
        emitted: list[int] = []
        req = self.request
        for i, tok in enumerate(new_tokens):
            lp = log_probs[i] if log_probs is not None else None
            if lp is not None:
                self.cum_log_prob += lp.full
            if req.end_id is not None and tok == req.end_id:
                self.finish_reason = "end_id"
                break
            self.tokens.append(tok)
            emitted.append(tok)
            if lp is not None:
                self.log_probs.append(lp)
            if any(w and self.tokens[-len(w) :] == list(w) for w in req.stop_words):
                self.finish_reason = "stop_words"
                break
            if self.remaining <= 0:
                self.finish_reason = "length"
                break
        return emitted
