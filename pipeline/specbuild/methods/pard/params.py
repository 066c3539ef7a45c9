"""PARD's params: the parallel draft model a Speculation carries."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from specbuild.speculation import MethodParams, Speculation


@dataclass(frozen=True)
class PardDraft(MethodParams):
    """A PARD draft model: the target's vocabulary plus a mask token; all K drafts from one forward."""

    path: Path
    num_draft_tokens: int
    mask_token_id: int | None  # None: the draft config's (pard_token, mask_token_id, vocab_size)

    def draft_checkpoint(self) -> Path | None:
        return self.path

    def full_length(self, spec: Speculation) -> int | None:
        return self.num_draft_tokens
