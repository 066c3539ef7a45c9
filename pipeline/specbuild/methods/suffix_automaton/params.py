"""The suffix automaton's params: how a Speculation drafts from the text so far (and, with the global pool, from
the other requests')."""

from __future__ import annotations

from dataclasses import dataclass

from specbuild.speculation import MethodParams, Speculation


@dataclass(frozen=True)
class SuffixDrafts(MethodParams):
    """Drafts that followed the longest earlier match of the text's suffix (automaton.py, pool.py)."""

    num_draft_tokens: int
    max_matching_ngram_size: int  # -1: the longest match; n > 0: n-grams from n down to 1
    enable_global_pool: bool
    global_pool_size: int | None  # None: max(64, max_batch_size) with the global pool

    def full_length(self, spec: Speculation) -> int | None:
        return self.num_draft_tokens
