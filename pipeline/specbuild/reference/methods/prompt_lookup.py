"""Prompt lookup decoding (Saxena 2023; TensorRT-LLM's NGram drafting through `draft_tokens_external`).

Each step:
    draft:   find the longest suffix n-gram (n <= max_matching_ngram_size) of prompt + output that occurred
             earlier in it; propose the (up to max_draft_len) tokens that followed its latest occurrence
    verify:  one target forward over [last token, drafts]
    accept:  speculative sampling with the drafts as a deterministic proposal (q = one-hot): lossless under
             sampling; greedy = token comparison
"""

from __future__ import annotations

from typing import Sequence as Seq

from specbuild.reference.batch import Batch
from specbuild.reference.methods import Method, StepOutput
from specbuild.reference.verify import verify_chain


def propose(tokens: Seq[int], max_ngram: int, max_draft: int) -> list[int]:
    """Drafts for `tokens`: the continuation of the latest earlier occurrence of its longest matching suffix."""
    if max_draft <= 0:
        return []
    n_tokens = len(tokens)
    for n in range(min(max_ngram, n_tokens - 1), 0, -1):
        suffix = list(tokens[n_tokens - n :])
        for start in range(n_tokens - n - 1, -1, -1):  # latest occurrence first, excluding the suffix itself
            if list(tokens[start : start + n]) == suffix:
                return list(tokens[start + n : start + n + max_draft])
    return []


class PromptLookup(Method):
    name = "prompt_lookup"
    reuses_prefix = True

    def __init__(self, engine, draft_engine=None, decoding=None):
        super().__init__(engine, draft_engine, decoding)
        self.max_draft_len = self.option("max_draft_len", engine.limits.max_draft_len, minimum=1)
        self.max_ngram = self.option("max_matching_ngram_size", 3, minimum=1)

    def step(self, batch: Batch) -> list[StepOutput]:
        drafts = [propose(seq.tokens, self.max_ngram, seq.draft_budget(self.max_draft_len)) for seq in batch.seqs]
        out = batch.feed("target", self.target, drafts)  # verify: [last token, drafts] per row

        outputs, keep = [], []
        for r, seq in enumerate(batch.seqs):
            k = len(drafts[r])
            tokens, accepted = verify_chain(seq, out.tail(r, k + 1), drafts[r], draft_probs=None)
            outputs.append(StepOutput(tokens, drafted=k, accepted=accepted))
            keep.append(out.n_new[r] - k + accepted)
        batch.caches["target"].commit_prefix(keep)
        return outputs


METHOD = PromptLookup
