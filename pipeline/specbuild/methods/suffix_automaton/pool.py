"""The suffix automata of the requests a server decodes: one per request, and, with `enable_global_pool`, one pool
that every request searches (TensorRT-LLM `SADecodingConfig`, tensorrt_llm/llmapi/llm_args.py@0004396):

- without the global pool each request drafts from its own automaton (prompt + accepted tokens) and the automaton
  is dropped when the request finishes; at most `max_batch_size` requests hold one (`SuffixAutomatonManager` has a
  slot per request and raises "No free slots available" past them: tensorrt_llm/_torch/speculative/
  suffix_automaton.py@1412a49).
- with the global pool ("each request searches all active SA states for the longest match, not just its own";
  "Completed requests' SA states are retained in the pool for cross-request search until the pool is full, at which
  point the oldest completed request is evicted"): `global_pool_size` slots, default max(64, max_batch_size), when
  set at least max_batch_size; "at most 1024 concurrent slots; suffix matching is capped at 64 tokens per request";
  a positive max_matching_ngram_size must then be at most 64 (`validate_sa_config`).

How a request searches the pool: its own automaton for the longest suffix (at most 64 tokens) that occurred earlier
in its own text, every other automaton for the longest suffix of its last 64 tokens that occurs there followed by at
least one token (SuffixAutomaton.longest_match_of); the longest match wins. The global-search kernel itself
(PR #12130, "Add global pool support for suffix automaton speculative decoding", 2026-03-12) was not in the sources
read, so its tie-break is not known: here equal lengths go to the request's own automaton, then to the other
requests in the order they entered the pool (oldest first), and within a text to the first occurrence.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Iterable

from specbuild.methods.suffix_automaton.automaton import LONGEST, NO_DRAFT, Draft, SuffixAutomaton, ngram_size_problem

MAX_SLOTS = 1024  # "at most 1024 concurrent slots" (llm_args.py@0004396 SADecodingConfig.enable_global_pool)
GLOBAL_MATCH_CAP = 64  # "suffix matching is capped at 64 tokens per request" (same field)
MIN_DEFAULT_POOL = 64  # global_pool_size default: max(64, max_batch_size)


def default_pool_size(max_batch_size: int) -> int:
    return max(MIN_DEFAULT_POOL, max_batch_size)


def pool_problems(
    *, enable_global_pool: bool, global_pool_size: int | None, max_batch_size: int, max_matching_ngram_size: int
) -> list[tuple[str, str]]:
    """(field, message) for each rule of SADecodingConfig these values break (llm_args.py@0004396
    `validate_sa_config` and the field descriptions); [] when they hold."""
    out: list[tuple[str, str]] = []
    problem = ngram_size_problem(max_matching_ngram_size)
    if problem:
        out.append(("max_matching_ngram_size", problem))
    if global_pool_size is not None and not enable_global_pool:
        out.append(("global_pool_size", "requires enable_global_pool: true"))
    if not enable_global_pool:
        return out
    if max_matching_ngram_size != LONGEST and not 1 <= max_matching_ngram_size <= GLOBAL_MATCH_CAP:
        out.append(
            (
                "max_matching_ngram_size",
                f"must be -1 (longest match) or in [1, {GLOBAL_MATCH_CAP}] with the global pool (suffix matching is "
                f"capped at {GLOBAL_MATCH_CAP} tokens); got {max_matching_ngram_size}",
            )
        )
    size = default_pool_size(max_batch_size) if global_pool_size is None else global_pool_size
    if global_pool_size is not None and global_pool_size < max_batch_size:
        out.append(
            (
                "global_pool_size",
                f"is {global_pool_size}, below max_batch_size {max_batch_size}: every request in flight needs a slot",
            )
        )
    if size > MAX_SLOTS:
        out.append(("global_pool_size", f"is {size}: the global pool has at most {MAX_SLOTS} slots"))
    return out


@dataclass
class _Entry:
    automaton: SuffixAutomaton
    finished: bool = False


@dataclass
class SuffixAutomatonPool:
    """The automata of the requests in flight (and, with the global pool, of finished ones kept for search)."""

    max_batch_size: int
    max_matching_ngram_size: int = LONGEST
    enable_global_pool: bool = False
    global_pool_size: int | None = None
    _entries: OrderedDict[int, _Entry] = field(default_factory=OrderedDict, init=False, repr=False)

    def __post_init__(self) -> None:
        problems = pool_problems(
            enable_global_pool=self.enable_global_pool,
            global_pool_size=self.global_pool_size,
            max_batch_size=self.max_batch_size,
            max_matching_ngram_size=self.max_matching_ngram_size,
        )
        if problems:
            raise ValueError("; ".join(f"{name} {message}" for name, message in problems))

    @property
    def slots(self) -> int:
        """How many automata the pool holds at most (requests in flight, plus finished ones with the global pool)."""
        if not self.enable_global_pool:
            return self.max_batch_size
        return default_pool_size(self.max_batch_size) if self.global_pool_size is None else self.global_pool_size

    @property
    def cap(self) -> int | None:
        return GLOBAL_MATCH_CAP if self.enable_global_pool else None

    def __contains__(self, request_id: int) -> bool:
        return request_id in self._entries

    def held(self) -> list[int]:
        """The request ids whose automata the pool holds, oldest first."""
        return list(self._entries)

    def active(self) -> list[int]:
        return [rid for rid, e in self._entries.items() if not e.finished]

    def start(self, request_id: int, prompt: Iterable[int]) -> None:
        """A request joins: its automaton is built from its prompt. With the global pool a full pool first evicts
        its oldest finished request."""
        if request_id in self._entries:
            raise ValueError(f"request {request_id} already has an automaton")
        if len(self._entries) >= self.slots:
            oldest_done = next((rid for rid, e in self._entries.items() if e.finished), None)
            if oldest_done is None:
                raise RuntimeError(
                    f"no free suffix-automaton slot: {self.slots} requests are in flight (the pool has a slot per "
                    "request up to max_batch_size)"
                )
            del self._entries[oldest_done]
        self._entries[request_id] = _Entry(SuffixAutomaton(prompt))

    def extend(self, request_id: int, tokens: Iterable[int]) -> None:
        """The tokens a verification step accepted (drafts and the bonus token)."""
        self._live(request_id).automaton.extend(tokens)

    def finish(self, request_id: int) -> None:
        """The request ended: its automaton stays for others to search with the global pool, else it is freed."""
        entry = self._entries.get(request_id)
        if entry is None:
            return
        if self.enable_global_pool:
            entry.finished = True
        else:
            del self._entries[request_id]

    def text(self, request_id: int) -> list[int]:
        return list(self._entries[request_id].automaton.tokens)

    def draft(self, request_id: int, max_draft_len: int) -> Draft:
        """The request's draft: from its own automaton, or from the whole pool with the global pool."""
        own = self._live(request_id).automaton
        if not self.enable_global_pool:
            return own.draft(max_draft_len, self.max_matching_ngram_size)
        others = [e.automaton for rid, e in self._entries.items() if rid != request_id]
        pattern = own.tokens[-GLOBAL_MATCH_CAP:]
        if self.max_matching_ngram_size == LONGEST:
            best = own.draft(max_draft_len, LONGEST, cap=GLOBAL_MATCH_CAP)
            for other in others:
                match = other.longest_match_of(pattern)
                if match is not None and match.length > best.match_length:  # ties keep the earlier candidate
                    best = Draft(match.length, other.continuation(match, max_draft_len))
            return best
        for size in range(self.max_matching_ngram_size, 0, -1):
            match = own.earlier_suffix_of_length(size)
            if match is not None:
                return Draft(size, own.continuation(match, max_draft_len))
            if len(pattern) < size:
                continue
            for other in others:
                found = other.longest_match_of(pattern[-size:])
                if found is not None and found.length == size:
                    return Draft(size, other.continuation(found, max_draft_len))
        return NO_DRAFT

    def _live(self, request_id: int) -> _Entry:
        entry = self._entries.get(request_id)
        if entry is None or entry.finished:
            raise KeyError(f"request {request_id} has no automaton in flight")
        return entry
