"""The `sa_config` enhancer: a suffix automaton beside a neural drafter (EAGLE-3, MTP) whose match, when at least
`threshold` tokens long, replaces the drafter's tokens for that step (TensorRT-LLM `SAEnhancerConfig` of
tensorrt_llm/llmapi/llm_args.py@0004396, beta: `threshold` (4), `enable_global_pool`; applied by
tensorrt_llm/_torch/speculative/sa_enhancer.py@1a487b3 `SADraftEnhancer.maybe_override_all_draft_tokens`). DOCS
(PR #11434) spell it `use_sa_spec` / `sa_spec_threshold`: not fields of that llm_args.py, so not written.

The recipe section (`speculation.sa_config` of the packs that take it), its model.yaml dict, the CPU rehearsal's
reading, and the reference decoders' override (`SaEnhancer`, on the chains a neural drafter produced: the override is
the pure `automaton.enhance`; the draft stays a deterministic proposal, so verification stays lossless).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

from pydantic import BaseModel, ConfigDict

from specbuild.errors import UserError
from specbuild.facts.bounds import PositiveInt32
from specbuild.methods.pack import Refusal
from specbuild.methods.suffix_automaton.automaton import LONGEST, enhance
from specbuild.methods.suffix_automaton.pool import SuffixAutomatonPool
from specbuild.section import Section

DEFAULT_THRESHOLD = 4  # SAEnhancerConfig.threshold (llm_args.py@0004396)
# SAEnhancerConfig exists in llm_args.py of main after 1.3.0rc3 (@0004396), in no copy of 1.0-1.2
RELEASES = ("1.3",)
THRESHOLD_KEY, GLOBAL_POOL_KEY = "sa_threshold", "sa_enable_global_pool"  # the reference engine's decoding keys


class SaEnhancerSection(Section):
    """A suffix automaton beside the neural drafter: a match at least `threshold` tokens long replaces its drafts."""

    threshold: PositiveInt32 = DEFAULT_THRESHOLD
    """Shortest suffix match (tokens) that overrides the drafter's tokens for that step."""
    enable_global_pool: bool = False
    """Search every request's automaton (finished ones kept until the pool is full), not only the request's own."""


class SAEnhancerConfig(BaseModel):
    """SAEnhancerConfig (llm_args.py@0004396) as the CPU rehearsal reads it (extra keys refused, as upstream)."""

    model_config = ConfigDict(extra="forbid")
    threshold: PositiveInt32 = DEFAULT_THRESHOLD
    enable_global_pool: bool = False


@dataclass(frozen=True)
class SaOverride:
    """The enhancer a Speculation carries (in the params of the packs that take it)."""

    threshold: int
    enable_global_pool: bool

    @classmethod
    def of(cls, section: SaEnhancerSection | None) -> SaOverride | None:
        return None if section is None else cls(section.threshold, section.enable_global_pool)


def sa_model_yaml(section: SaOverride | None, line: str) -> dict[str, Any] | Refusal | None:
    """model.yaml's `sa_config` for release `line` (None: the recipe has none)."""
    if section is None:
        return None
    if line not in RELEASES:
        return Refusal(
            f"sa_config (SAEnhancerConfig) is in llm_args.py of main after 1.3.0rc3 only, not in release {line}",
            "llm_api.release: 1.3, or remove speculation.sa_config",
        )
    return {"threshold": section.threshold, "enable_global_pool": section.enable_global_pool}


def sa_decoding(config: SAEnhancerConfig | None) -> dict[str, Any]:
    """The reference engine's decoding keys for a rehearsed `sa_config` ({} without one)."""
    if config is None:
        return {}
    return {THRESHOLD_KEY: config.threshold, GLOBAL_POOL_KEY: config.enable_global_pool}


def follow_rows(pool: SuffixAutomatonPool, seqs: Iterable) -> None:
    """Start the automata of rows new to the pool, extend the others with what they accepted, finish those no longer
    in the batch (kept for the others with the global pool)."""
    seqs = list(seqs)
    present = {seq.request_id for seq in seqs}
    for rid in pool.active():
        if rid not in present:
            pool.finish(rid)
    for seq in seqs:
        if seq.request_id not in pool:
            pool.start(seq.request_id, seq.tokens)
        else:
            known = len(pool.text(seq.request_id))
            pool.extend(seq.request_id, seq.tokens[known:])


class SaEnhancer:
    """The override on a neural drafter's chains, per row: the automaton's continuation when its match is at least
    `threshold` tokens long (at most the chain's length), the chain otherwise."""

    def __init__(self, threshold: int, enable_global_pool: bool, max_batch_size: int):
        self.threshold = threshold
        self.pool = SuffixAutomatonPool(
            max_batch_size=max_batch_size, max_matching_ngram_size=LONGEST, enable_global_pool=enable_global_pool
        )
        self.overridden = 0  # chains replaced so far (the decoder's counters; tests read it)

    @classmethod
    def from_decoding(cls, decoding: dict, max_batch_size: int, where: str) -> SaEnhancer | None:
        """The enhancer an engine's decoding section asks for (None: no sa_config)."""
        if decoding.get(THRESHOLD_KEY) is None:
            return None
        try:
            threshold = int(decoding[THRESHOLD_KEY])
            if threshold < 1:
                raise ValueError(f"must be >= 1, got {threshold}")
            return cls(threshold, bool(decoding.get(GLOBAL_POOL_KEY, False)), max_batch_size)
        except ValueError as exc:
            raise UserError(f"{where}.{THRESHOLD_KEY}: {exc}") from None

    def override(self, seqs: Sequence, drafts: list[Any], chain: Callable[[int, list[int]], Any]) -> list[Any]:
        """`drafts` (the rows' chains, RowTree: tokens[0] is the root) with each row's replaced where the automaton's
        match is long enough; `chain(root, tokens)` makes the replacement row."""
        follow_rows(self.pool, seqs)
        out = []
        for seq, draft in zip(seqs, drafts):
            neural = list(draft.tokens[1:])
            tokens = list(enhance(neural, self.pool.draft(seq.request_id, len(neural)), self.threshold))
            if not neural or tokens == neural:
                out.append(draft)
                continue
            self.overridden += 1
            out.append(chain(draft.tokens[0], tokens))
        return out
