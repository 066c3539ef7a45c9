"""Suffix automaton (SA): drafts are the tokens that followed the longest earlier occurrence of the text's suffix,
found through a suffix automaton over the prompt and the text so far; with the global pool, through every request's
automaton (TensorRT-LLM's `SA` decoding type, SADecodingConfig of tensorrt_llm/llmapi/llm_args.py@0004396; drafting
inside the target forward: tensorrt_llm/_torch/speculative/sa_worker.py@ec4eb98).

The LLM-API flavour only (the engine path has no such mode), from release 1.3 (the config is in main's llm_args.py
after 1.3.0rc3, not in 1.2's neighbours). The pack: this section, params.py, model.yaml's speculative_config and the
CPU rehearsal's reading here; automaton.py and pool.py (the algorithm, stdlib only); decoder.py (reference).
"""

from __future__ import annotations

from typing import Any, Iterator, Literal

from pydantic import Field

from specbuild.facts.bounds import PositiveInt32
from specbuild.findings import Finding
from specbuild.methods.llm_args import DecodingBaseConfig
from specbuild.methods.pack import MethodPack, Refusal, Rehearsed, Unservable
from specbuild.methods.suffix_automaton.automaton import LONGEST
from specbuild.methods.suffix_automaton.params import SuffixDrafts
from specbuild.methods.suffix_automaton.pool import pool_problems
from specbuild.section import Section
from specbuild.speculation import Speculation

# SADecodingConfig exists in llm_args.py of main after 1.3.0rc3 (ARGS-NEW, @0004396), in no copy of 1.0-1.2
RELEASES = ("1.3",)


class SuffixAutomatonConfig(Section):
    """Draft what followed the longest earlier match of the text's suffix (no weights)."""

    method: Literal["suffix_automaton"]
    max_draft_len: PositiveInt32 = 4
    """Tokens copied after the match, per step."""
    max_matching_ngram_size: int = Field(default=LONGEST, ge=-1, le=1_000_000)
    """-1: the longest suffix that occurred before (through the automaton); n > 0: the last n tokens, then n - 1,
    down to 1 (TensorRT-LLM's fixed n-gram mode). 0 is invalid."""
    enable_global_pool: bool = False
    """Search every request's automaton, and keep finished requests' until the pool is full (oldest evicted first);
    suffix matches are then capped at 64 tokens."""
    global_pool_size: PositiveInt32 | None = None
    """Automata the global pool holds (default max(64, build.max_batch_size); at least build.max_batch_size, at most
    1024)."""


class SADecodingConfig(DecodingBaseConfig):
    """SADecodingConfig (llm_args.py@0004396) as the CPU rehearsal validates it."""

    decoding_type: Literal["SA"]
    max_matching_ngram_size: int = LONGEST
    enable_global_pool: bool = False
    global_pool_size: PositiveInt32 | None = None


class SuffixAutomatonPack(MethodPack):
    name = "suffix_automaton"
    Config = SuffixAutomatonConfig
    Params = SuffixDrafts
    summary = "drafts what followed the longest earlier match of the text's suffix (a suffix automaton)"
    decoding_types = ("SA",)
    rehearsal_config = SADecodingConfig
    decoder = "decoder:SuffixAutomatonDecoder"

    def describe(self, recipe) -> Speculation:
        s: SuffixAutomatonConfig = recipe.speculation
        return Speculation(
            method=self.name,
            mode=None,  # no engine-path mode: TensorRT-LLM's LLM API only
            max_draft_len=s.max_draft_len,
            params=SuffixDrafts(s.max_draft_len, s.max_matching_ngram_size, s.enable_global_pool, s.global_pool_size),
        )

    def checks(self, recipe) -> Iterator[Finding]:
        s: SuffixAutomatonConfig = recipe.speculation
        for field, message in pool_problems(
            enable_global_pool=s.enable_global_pool,
            global_pool_size=s.global_pool_size,
            max_batch_size=recipe.build.max_batch_size,
            max_matching_ngram_size=s.max_matching_ngram_size,
        ):
            yield Finding(("speculation", field), f"{message} (SADecodingConfig, llm_args.py@0004396)")

    # --- translations ---------------------------------------------------------------------------------------------
    def speculative_config(self, spec, release, path) -> dict[str, Any] | Refusal:
        if release.line not in RELEASES:
            return Refusal(
                f"SA (SADecodingConfig) is in llm_args.py of main after 1.3.0rc3 only, not in release {release.line}",
                "llm_api.release: 1.3, or prompt_lookup",
            )
        drafts: SuffixDrafts = spec.params
        out: dict[str, Any] = {
            "decoding_type": "SA",
            "max_draft_len": spec.max_draft_len,
            "max_matching_ngram_size": drafts.max_matching_ngram_size,
            "enable_global_pool": drafts.enable_global_pool,
        }
        if drafts.global_pool_size is not None:
            out["global_pool_size"] = drafts.global_pool_size
        return out

    def rehearse(self, config: SADecodingConfig, k: int) -> Rehearsed:
        if config.max_matching_ngram_size == 0:
            raise Unservable("max_matching_ngram_size must be > 0 (fixed ngram) or -1 (longest match). Got 0.")
        decoding: dict[str, Any] = {
            "max_draft_len": k,
            "max_matching_ngram_size": config.max_matching_ngram_size,
            "enable_global_pool": config.enable_global_pool,
        }
        if config.global_pool_size is not None:
            decoding["global_pool_size"] = config.global_pool_size
        return Rehearsed(
            decoding,
            notes=(
                "SA drafts only the continuation of its match (TensorRT-LLM verifies max_draft_len tokens every "
                "step, the ones past the continuation whatever its draft buffer held)",
            ),
        )


PACK = SuffixAutomatonPack()
