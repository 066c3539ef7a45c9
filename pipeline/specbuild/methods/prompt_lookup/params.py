"""Prompt lookup's params: how a Speculation drafts from the text so far."""

from __future__ import annotations

from dataclasses import dataclass

from specbuild.speculation import MethodParams, Speculation


@dataclass(frozen=True)
class PromptLookup(MethodParams):
    """Drafts copied from the prompt and output so far, after a match of the last n-gram."""

    num_draft_tokens: int
    max_matching_ngram_size: int

    def full_length(self, spec: Speculation) -> int | None:
        return self.num_draft_tokens
