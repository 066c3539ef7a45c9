"""Draft-target's params: the draft model a Speculation carries."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from specbuild.speculation import MethodParams, Speculation


@dataclass(frozen=True)
class DraftModel(MethodParams):
    """A separate draft model with the target's vocabulary; its engine is built beside the target's."""

    path: Path
    num_draft_tokens: int  # drafts proposed per round
    use_draft_logits: bool  # accept by logit ratio (the engines gather generation logits)
    tp_size: int
    fast_logits: bool

    def draft_checkpoint(self) -> Path | None:
        return self.path

    def full_length(self, spec: Speculation) -> int | None:
        return self.num_draft_tokens
