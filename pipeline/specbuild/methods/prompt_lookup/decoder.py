"""Prompt lookup decoding (Saxena 2023; TensorRT-LLM's NGram drafting through `draft_tokens_external`).

Each step:
    draft:   find the longest suffix n-gram (n <= max_matching_ngram_size) of prompt + output that occurred
             earlier in it; propose the (up to max_draft_len) tokens that followed its oldest occurrence, as
             TensorRT-LLM's NGram pool does (specbuild/standalone/prompt_lookup_drafts.py: the one definition, shared with
             our Triton BLS)
    verify:  one target forward over [last token, drafts]
    accept:  speculative sampling with the drafts as a deterministic proposal (q = one-hot): lossless under
             sampling; greedy = token comparison
"""

from __future__ import annotations

from specbuild.facts.engine_facts import SpecMode
from specbuild.standalone.prompt_lookup_drafts import DEFAULT_MAX_MATCHING_NGRAM_SIZE, propose
from specbuild.reference.decoder.batch import Batch
from specbuild.reference.decoder.methods import Decoder, StepOutput
from specbuild.reference.decoder.verify import verify_drafts


class PromptLookupDecoder(Decoder):
    name = "prompt_lookup"
    engine_mode = SpecMode.DRAFT_TOKENS_EXTERNAL
    reuses_prefix = True

    def __init__(self, engine, draft_engine=None, decoding=None):
        super().__init__(engine, draft_engine, decoding)
        self.max_draft_len = self.option("max_draft_len", engine.limits.max_draft_len, minimum=1)
        self.max_ngram = self.option("max_matching_ngram_size", DEFAULT_MAX_MATCHING_NGRAM_SIZE, minimum=1)

    def step(self, batch: Batch) -> list[StepOutput]:
        drafts = [
            propose(seq.tokens, self.max_ngram, seq.draft_budget(self.capped(self.max_draft_len))) for seq in batch.seqs
        ]
        return verify_drafts(batch, self.target, drafts)
