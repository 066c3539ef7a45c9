"""What TensorRT-LLM runs for `decoding_type: AUTO`: n-gram speculation chosen from the LLM's max_batch_size, off
above 32 requests in flight.

The newest source read, tensorrt_llm/_torch/speculative/auto_heuristic.py@f00d21a `suggest_spec_config(
max_batch_size)`: "For now, we always use an ngram scheme that gets disabled at BS>=32":
NGramDecodingConfig(max_draft_len=5 if max_batch_size <= 4 else 3, max_matching_ngram_size=3 if max_batch_size <= 4
else 5, max_concurrency=32, is_keep_all=True, is_use_oldest=True, is_public_pool=True). The choice is made once, from
the configured max_batch_size, not from the load; max_concurrency then turns speculation off above 32 requests in
flight (DecodingBaseConfig.max_concurrency: "speculation will be disabled at batch sizes above this value"; for NGram,
which does not vary its draft length, it is not translated into a draft_len_schedule: llm_args.py@0004396). The
1.0-era AutoDecodingConfig docstring told the same by concurrency (<= 4: 5 drafts, n-gram 3; <= 32: 3 drafts, n-gram
5; above 32: off), and the 1.0 release notes "n-gram auto-enabled at concurrency <= 32"; the code decides by
max_batch_size.
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_CONCURRENCY = 32  # auto_heuristic.py@f00d21a: speculation off above 32 requests in flight
SMALL_BATCH = 4  # max_batch_size <= 4: longer drafts from shorter n-grams


@dataclass(frozen=True)
class AutoChoice:
    """The NGram configuration AUTO runs."""

    max_draft_len: int
    max_matching_ngram_size: int
    max_concurrency: int = MAX_CONCURRENCY
    is_keep_all: bool = True
    is_use_oldest: bool = True
    is_public_pool: bool = True

    def describe(self) -> str:
        return (
            f"NGram: {self.max_draft_len} drafts from n-grams of up to {self.max_matching_ngram_size} tokens, "
            f"speculation off above {self.max_concurrency} requests in flight"
        )


def suggest(max_batch_size: int) -> AutoChoice:
    """auto_heuristic.py@f00d21a `suggest_spec_config`."""
    if max_batch_size < 1:
        raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")
    small = max_batch_size <= SMALL_BATCH
    return AutoChoice(max_draft_len=5 if small else 3, max_matching_ngram_size=3 if small else 5)


def speculates(choice: AutoChoice, in_flight: int) -> bool:
    """Whether AUTO drafts at this many requests in flight (max_concurrency: off above it)."""
    return in_flight <= choice.max_concurrency
