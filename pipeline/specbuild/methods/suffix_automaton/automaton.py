"""A suffix automaton over one request's tokens (the prompt, then every token accepted so far), and drafting from it.

The automaton is the classic online construction (Blumer et al. 1985): one state per class of substrings that end at
the same set of positions, at most 2n - 1 states and 3n - 4 transitions for n >= 3 tokens, each token added in
amortised O(1). Every state keeps `first_end`, the end position of its strings' first occurrence; a clone copies it
from the state it splits, as TensorRT-LLM's kernel does (cpp/tensorrt_llm/kernels/speculativeDecoding/suffixAutomaton/
suffixAutomaton.h@b120c7c `SuffixAutomaton::extend`: `pos` of a new state is the new token's index,
`pushBackClone(q)` copies q's `pos`). Lookups follow the same file:

- `longest_earlier_suffix` is `SuffixAutomaton::lookup`: walk suffix links from the state of the whole text to the
  first state whose first occurrence does not end at the last token; its length is the longest suffix that occurred
  earlier, and the draft is what followed that suffix's FIRST occurrence (the earliest one: ties between earlier
  occurrences go to the oldest).
- `earlier_suffix_of_length` is `SuffixAutomaton::lookupFixed`: the suffix of exactly n tokens, at its first
  occurrence, when that occurrence ends before the last token.
- drafting with a positive `max_matching_ngram_size` n tries n, n - 1, ..., 1 and takes the first size that matches
  (suffixAutomatonKernels.cu@a070a1f `suffixAutomatonExtendNgramKernel`: "Fixed-size ngram mode - try sizes from
  maxNgramSize down to 1"); -1 is the longest match; 0 is refused, as `SADecodingConfig.validate_sa_config` does
  (tensorrt_llm/llmapi/llm_args.py@0004396).
- the draft is the tokens that followed the match, at most `max_draft_len` of them and never past the end of the
  text (`SuffixAutomaton::getDraftTokens`). Upstream fills a fixed K-wide buffer whose positions past the available
  continuation keep whatever the buffer held; here a draft is only the tokens that really followed.

`longest_match_of(pattern)` answers the global pool (pool.py): the longest suffix of another request's text that
occurs in this automaton's text followed by at least one token.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

# max_matching_ngram_size: -1 asks for the longest match through the automaton
LONGEST = -1


@dataclass(frozen=True)
class Match:
    """A suffix of a request's text found in some text: `length` tokens long, followed there from index `start` on
    (the draft is `tokens[start:start + k]` of that text)."""

    length: int
    start: int


@dataclass(frozen=True)
class Draft:
    """What a lookup drafts: the match length (0: none) and the tokens that followed the match (at most K)."""

    match_length: int
    tokens: tuple[int, ...]


NO_DRAFT = Draft(0, ())


def ngram_size_problem(value: int) -> str | None:
    """Why `value` is not a max_matching_ngram_size (None: it is one): -1 (longest match) or a positive n."""
    if value == LONGEST or value > 0:
        return None
    return (
        f"must be > 0 (fixed n-gram, tried from n down to 1) or -1 (longest match through the automaton); got {value}"
    )


class SuffixAutomaton:
    """The suffix automaton of `tokens`, grown token by token with `append` / `extend`."""

    __slots__ = ("tokens", "_len", "_link", "_next", "_first_end", "_last")

    def __init__(self, tokens: Iterable[int] = ()):
        self.tokens: list[int] = []
        # state 0 is the root (the empty string); link -1 means none
        self._len: list[int] = [0]
        self._link: list[int] = [-1]
        self._next: list[dict[int, int]] = [{}]
        self._first_end: list[int] = [-1]
        self._last = 0
        self.extend(tokens)

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def num_states(self) -> int:
        return len(self._len)

    @property
    def num_transitions(self) -> int:
        return sum(len(edges) for edges in self._next)

    def extend(self, tokens: Iterable[int]) -> None:
        for token in tokens:
            self.append(token)

    def append(self, token: int) -> None:
        token = int(token)
        self.tokens.append(token)
        cur = self._new_state(self._len[self._last] + 1, len(self.tokens) - 1)
        p = self._last
        while p != -1 and token not in self._next[p]:
            self._next[p][token] = cur
            p = self._link[p]
        if p == -1:
            self._link[cur] = 0
        else:
            q = self._next[p][token]
            if self._len[p] + 1 == self._len[q]:
                self._link[cur] = q
            else:
                clone = self._new_state(self._len[p] + 1, self._first_end[q])  # the clone keeps q's first occurrence
                self._next[clone] = dict(self._next[q])
                self._link[clone] = self._link[q]
                while p != -1 and self._next[p].get(token) == q:
                    self._next[p][token] = clone
                    p = self._link[p]
                self._link[q] = clone
                self._link[cur] = clone
        self._last = cur

    def _new_state(self, length: int, first_end: int) -> int:
        self._len.append(length)
        self._link.append(-1)
        self._next.append({})
        self._first_end.append(first_end)
        return len(self._len) - 1

    # ------------------------------------------------------------------------------------------ lookups
    def longest_earlier_suffix(self, cap: int | None = None) -> Match | None:
        """The longest suffix of the text (at most `cap` tokens) that occurred before, at its first occurrence."""
        n = len(self.tokens)
        state = self._last
        while state > 0 and self._first_end[state] + 1 >= n:  # occurs only at the end: no earlier occurrence
            state = self._link[state]
        if state <= 0:
            return None
        length = self._len[state]
        if cap is not None and length > cap:
            length = cap
            while self._len[self._link[state]] >= cap:  # the state that holds the capped suffix
                state = self._link[state]
        return Match(length, self._first_end[state] + 1)

    def earlier_suffix_of_length(self, n: int) -> Match | None:
        """The suffix of exactly `n` tokens, when it occurred before (at its first occurrence)."""
        size = len(self.tokens)
        if n <= 0 or size < n + 1:
            return None
        state = self._last
        while state > 0 and self._len[self._link[state]] >= n:  # the state whose lengths include n
            state = self._link[state]
        if state <= 0 or self._first_end[state] + 1 >= size:
            return None
        return Match(n, self._first_end[state] + 1)

    def longest_match_of(self, pattern: Sequence[int]) -> Match | None:
        """The longest suffix of `pattern` that occurs in this text with at least one token after it (at its first
        such occurrence): what the global pool asks of another request's automaton."""
        state, length = 0, 0
        for token in pattern:  # matching statistics: the longest suffix of the pattern read so far in the text
            token = int(token)
            while state != 0 and token not in self._next[state]:
                state = self._link[state]
                length = self._len[state]
            if token in self._next[state]:
                state = self._next[state][token]
                length += 1
        size = len(self.tokens)
        while state > 0:
            if self._first_end[state] + 1 < size:
                return Match(length, self._first_end[state] + 1)
            state = self._link[state]  # occurs only at the text's end: no token follows; try a shorter suffix
            length = self._len[state]
        return None

    def continuation(self, match: Match, k: int) -> tuple[int, ...]:
        """At most `k` tokens that followed `match` (SuffixAutomaton::getDraftTokens)."""
        return tuple(self.tokens[match.start : match.start + max(0, k)])

    def draft(self, max_draft_len: int, max_matching_ngram_size: int = LONGEST, cap: int | None = None) -> Draft:
        """The draft for the text so far: the longest (or fixed n-gram) suffix that occurred before, and what
        followed it. `cap` bounds the suffix length (the global pool's 64 tokens)."""
        problem = ngram_size_problem(max_matching_ngram_size)
        if problem:
            raise ValueError(f"max_matching_ngram_size {problem}")
        match = self._match(max_matching_ngram_size, cap)
        if match is None:
            return NO_DRAFT
        return Draft(match.length, self.continuation(match, max_draft_len))

    def _match(self, ngram: int, cap: int | None) -> Match | None:
        if ngram == LONGEST:
            return self.longest_earlier_suffix(cap)
        for n in range(ngram, 0, -1):
            found = self.earlier_suffix_of_length(n)
            if found is not None:
                return found
        return None


def enhance(neural: Sequence[int], sa: Draft, threshold: int) -> tuple[int, ...]:
    """The `sa_config` enhancer (TensorRT-LLM tensorrt_llm/_torch/speculative/sa_enhancer.py@1a487b3
    `SADraftEnhancer.maybe_override_all_draft_tokens`): when the suffix match is at least `threshold` tokens long the
    automaton's tokens replace all K of the neural drafter's (K = len(neural)), else the neural drafts stand.
    Upstream overwrites the whole K-wide row, positions past the match's continuation included (stale buffer
    contents); here the draft is then the continuation alone, which can be shorter than K."""
    if threshold < 1:
        raise ValueError(f"threshold must be >= 1 (SAEnhancerConfig.threshold is a PositiveInt); got {threshold}")
    if sa.match_length >= threshold and sa.tokens:
        return tuple(sa.tokens[: len(neural)])
    return tuple(neural)
