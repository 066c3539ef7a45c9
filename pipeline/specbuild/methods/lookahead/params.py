"""Lookahead decoding's params: the window a Speculation carries."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from specbuild.speculation import MethodParams, Speculation


@dataclass(frozen=True)
class LookaheadWindow(MethodParams):
    """Lookahead decoding's (W, N, G)."""

    drafts_tokens: ClassVar[bool] = False
    window_size: int
    ngram_size: int
    verification_set_size: int

    def full_length(self, spec: Speculation) -> int | None:
        return None  # a step runs its (W, N, G) window rather than a draft length

    def accept_depth(self, spec: Speculation) -> int | None:
        return self.ngram_size - 1  # a verified n-gram continues the last token by N - 1 tokens
