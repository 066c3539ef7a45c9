"""Prompt lookup (n-gram): drafts are copied from earlier text where the last n-gram occurred before.

The engine path has no mode of its own: the target is built with draft_tokens_external and drafts arrive as
draft_input_ids (tensorrt_llm/commands/build.py, examples/ngram/README.md). On Triton our BLS finds the drafts
(as TensorRT-LLM triton_backend/all_models/inflight_batcher_llm/tensorrt_llm_bls/1/lib/decode.py@4db6828 runs a draft).
The drafting rule itself is written once, in specbuild/standalone/prompt_lookup_drafts.py. The pack: this section,
params.py, the BLS's and model.yaml's parameters and the CPU rehearsal's reading here, decoder.py (reference).
"""

from __future__ import annotations

from typing import Any, Iterator, Literal

from specbuild.facts.bounds import NonNegativeInt32, PositiveInt32
from specbuild.facts.engine_facts import SpecMode
from specbuild.findings import Finding
from specbuild.methods.llm_args import DecodingBaseConfig
from specbuild.methods.pack import MethodPack, Rehearsed, Unservable
from specbuild.methods.prompt_lookup.params import PromptLookup
from specbuild.section import Section
from specbuild.standalone.prompt_lookup_drafts import DEFAULT_MAX_MATCHING_NGRAM_SIZE
from specbuild.speculation import Speculation


class PromptLookupConfig(Section):
    """Draft by matching the last tokens against the prompt and the text generated so far."""

    method: Literal["prompt_lookup"]
    max_draft_len: PositiveInt32 = 4
    """Tokens copied after a match (TensorRT-LLM's prompt_lookup_num_tokens / ngram max_draft_len)."""
    max_matching_ngram_size: PositiveInt32 = DEFAULT_MAX_MATCHING_NGRAM_SIZE
    """Longest n-gram tried when searching for a match (longest first, down to 1)."""


class NGramDecodingConfig(DecodingBaseConfig):
    """NGramDecodingConfig (llm_args.py) as the CPU rehearsal reads it: the pool flags are accepted; the reference
    drafts as the defaults is_keep_all and is_use_oldest do, from each request's own prompt and output
    (specbuild/standalone/prompt_lookup_drafts.py), whatever they say."""

    decoding_type: Literal["NGram"]
    max_matching_ngram_size: NonNegativeInt32 = 2
    is_keep_all: bool = True
    is_use_oldest: bool = True
    is_public_pool: bool = True


class PromptLookupPack(MethodPack):
    name = "prompt_lookup"
    Config = PromptLookupConfig
    Params = PromptLookup
    summary = "drafts copied from matching n-grams in the prompt and output"
    decoding_types = ("NGram",)
    two_model_drafter = True
    overlap_off = True  # TensorRT-LLM docs/source/features/speculative-decoding.md@04c8822, the NGram example
    rehearsal_config = NGramDecodingConfig
    decoder = "decoder:PromptLookupDecoder"

    def describe(self, recipe) -> Speculation:
        spec: PromptLookupConfig = recipe.speculation
        return Speculation(
            method=self.name,
            mode=SpecMode.DRAFT_TOKENS_EXTERNAL,
            max_draft_len=spec.max_draft_len,
            params=PromptLookup(spec.max_draft_len, spec.max_matching_ngram_size),
        )

    def checks(self, recipe) -> Iterator[Finding]:
        if not recipe.build.use_paged_context_fmha:
            yield Finding(
                ("build", "use_paged_context_fmha"),
                "prompt lookup needs KV-cache reuse, which needs paged context FMHA — set use_paged_context_fmha: true",
            )

    # --- translations ---------------------------------------------------------------------------------------------
    def bls_parameters(self, spec) -> dict[str, str]:
        drafts = spec.params
        return {
            "speculative_method": self.name,
            "default_num_draft_tokens": str(drafts.num_draft_tokens),
            "max_matching_ngram_size": str(drafts.max_matching_ngram_size),
        }

    def decoding(self, spec) -> dict[str, Any]:
        drafts = spec.params
        return {"max_draft_len": drafts.num_draft_tokens, "max_matching_ngram_size": drafts.max_matching_ngram_size}

    def speculative_config(self, spec, release, path) -> dict[str, Any]:
        # <= 1.1 defaults max_matching_ngram_size to 0 (llm_args.py NGramDecodingConfig): always written; the pool
        # flags are the 1.2 defaults
        return {
            "decoding_type": "NGram",
            "max_draft_len": spec.max_draft_len,
            "max_matching_ngram_size": spec.params.max_matching_ngram_size,
            "is_keep_all": True,
            "is_use_oldest": True,
            "is_public_pool": True,
        }

    def rehearse(self, config: NGramDecodingConfig, k: int) -> Rehearsed:
        if config.max_matching_ngram_size < 1:
            raise Unservable(
                "max_matching_ngram_size is 0 (the <= 1.1 default) — set it to the longest n-gram to match, e.g. 2"
            )
        notes = [
            "NGram pool flags (is_keep_all, is_use_oldest, is_public_pool) are accepted; the reference "
            "drafts from each request's own prompt and output, the oldest match first (as the defaults "
            "is_keep_all and is_use_oldest do)"
        ]
        unfollowed = [key for key in ("is_keep_all", "is_use_oldest") if not getattr(config, key)]
        if unfollowed:
            notes.append(
                f"{', '.join(unfollowed)}: false is not followed on the CPU (the reference drafts as true does)"
            )
        return Rehearsed(
            {"max_draft_len": k, "max_matching_ngram_size": int(config.max_matching_ngram_size)}, notes=tuple(notes)
        )


PACK = PromptLookupPack()
