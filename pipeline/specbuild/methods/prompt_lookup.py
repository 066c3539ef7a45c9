"""Prompt lookup (n-gram): drafts are copied from earlier text where the last n-gram occurred before.

The engine path has no mode of its own: the target is built with draft_tokens_external and drafts arrive as
draft_input_ids (tensorrt_llm/commands/build.py, examples/ngram/README.md). On Triton our BLS finds the drafts
(as TensorRT-LLM triton_backend/all_models/inflight_batcher_llm/tensorrt_llm_bls/1/lib/decode.py@4db6828 runs a draft).
The drafting rule itself is written once, in specbuild/standalone/prompt_lookup_drafts.py.
"""

from __future__ import annotations

from typing import Iterator, Literal

from specbuild.facts.bounds import PositiveInt32
from specbuild.facts.engine_facts import SpecMode
from specbuild.findings import Finding
from specbuild.methods.base import Method
from specbuild.section import Section
from specbuild.standalone.prompt_lookup_drafts import DEFAULT_MAX_MATCHING_NGRAM_SIZE
from specbuild.speculation import PromptLookup as PromptLookupDrafts, Speculation


class PromptLookupConfig(Section):
    """Draft by matching the last tokens against the prompt and the text generated so far."""

    method: Literal["prompt_lookup"]
    max_draft_len: PositiveInt32 = 4
    """Tokens copied after a match (TensorRT-LLM's prompt_lookup_num_tokens / ngram max_draft_len)."""
    max_matching_ngram_size: PositiveInt32 = DEFAULT_MAX_MATCHING_NGRAM_SIZE
    """Longest n-gram tried when searching for a match (longest first, down to 1)."""


class PromptLookup(Method):
    name = "prompt_lookup"
    Config = PromptLookupConfig
    summary = "drafts copied from matching n-grams in the prompt and output"

    def describe(self, recipe) -> Speculation:
        spec: PromptLookupConfig = recipe.speculation
        return Speculation(
            method=self.name,
            mode=SpecMode.DRAFT_TOKENS_EXTERNAL,
            max_draft_len=spec.max_draft_len,
            params=PromptLookupDrafts(spec.max_draft_len, spec.max_matching_ngram_size),
        )

    def checks(self, recipe) -> Iterator[Finding]:
        if not recipe.build.use_paged_context_fmha:
            yield Finding(
                ("build", "use_paged_context_fmha"),
                "prompt lookup needs KV-cache reuse, which needs paged context FMHA — set use_paged_context_fmha: true",
            )
