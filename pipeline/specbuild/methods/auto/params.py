"""AUTO's params: the NGram configuration TensorRT-LLM picks for the LLM's max_batch_size (heuristic.py)."""

from __future__ import annotations

from dataclasses import dataclass

from specbuild.methods.auto.heuristic import AutoChoice
from specbuild.speculation import MethodParams, Speculation


@dataclass(frozen=True)
class AutoNgram(MethodParams):
    """What `decoding_type: AUTO` runs: n-gram drafting chosen from max_batch_size, off above 32 requests in flight."""

    max_batch_size: int  # the LLM's (build.max_batch_size), which the choice is made from
    choice: AutoChoice

    def full_length(self, spec: Speculation) -> int | None:
        return self.choice.max_draft_len
