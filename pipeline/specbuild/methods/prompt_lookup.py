"""Prompt lookup (n-gram): drafts are copied from earlier text where the last n-gram occurred before.

The engine path has no mode of its own: the target is built with draft_tokens_external and drafts arrive as
draft_input_ids (engine fact sheet §0, §4). On Triton our BLS finds the drafts (repository issue #5).
"""

from __future__ import annotations

from typing import Literal

from pydantic import PositiveInt

from specbuild.methods.base import Method, Section


class PromptLookupConfig(Section):
    """Draft by matching the last tokens against the prompt and the text generated so far."""

    method: Literal["prompt_lookup"]
    max_draft_len: PositiveInt = 4
    """Tokens copied after a match (TensorRT-LLM's prompt_lookup_num_tokens / ngram max_draft_len)."""
    max_matching_ngram_size: PositiveInt = 2
    """Longest n-gram tried when searching for a match (longest first, down to 1)."""


class PromptLookup(Method):
    name = "prompt_lookup"
    Config = PromptLookupConfig
    trtllm_mode = "draft_tokens_external"
    mode_flag = 2
    decoding_mode = None
    serving_model = "tensorrt_llm_bls"
    summary = "drafts copied from matching n-grams in the prompt and output"

    def max_draft_len(self, spec: PromptLookupConfig) -> int:
        return spec.max_draft_len

    def checks(self, recipe):
        from specbuild.methods.base import Finding

        if not recipe.build.use_paged_context_fmha:
            yield Finding(("build", "use_paged_context_fmha"), "prompt lookup needs KV-cache reuse, which needs paged "
                          "context FMHA — set use_paged_context_fmha: true")

    def bls_parameters(self, recipe) -> dict[str, str]:
        spec: PromptLookupConfig = recipe.speculation
        return {"speculative_method": "prompt_lookup", "default_num_draft_tokens": str(spec.max_draft_len),
                "max_matching_ngram_size": str(spec.max_matching_ngram_size)}

    def reference_decoding(self, recipe) -> dict:
        spec: PromptLookupConfig = recipe.speculation
        return {"max_draft_len": spec.max_draft_len, "max_matching_ngram_size": spec.max_matching_ngram_size}
