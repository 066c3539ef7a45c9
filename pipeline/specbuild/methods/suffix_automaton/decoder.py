"""Suffix-automaton drafting (TensorRT-LLM's `SA` decoding type: tensorrt_llm/_torch/speculative/sa_worker.py@ec4eb98
`SAWorker`, drafting inside the target forward) on the reference executor.

Each step, per row:
    automaton: the row's suffix automaton (pool.py of this pack) holds its prompt and every
               accepted token; a row new to the method starts one, a row gone from the batch finishes it (kept for
               the other rows to search with the global pool);
    draft:     the longest suffix that occurred before (or the fixed n-gram tried from n down to 1), and the tokens that
               followed its first occurrence, at most max_draft_len (cut to the scheduled length and to what the row
               may still generate);
    verify:    one target forward over [last token, drafts]; accept: the drafts as a deterministic proposal
               (verify_chain: greedy = token comparison, lossless under sampling).
Upstream verifies K tokens every step, padding past the continuation with whatever its draft buffer held; here a row
drafts only the continuation (fewer tokens, and none without a match).
"""

from __future__ import annotations

from specbuild.errors import UserError
from specbuild.facts.engine_facts import SpecMode
from specbuild.methods.suffix_automaton.automaton import LONGEST
from specbuild.methods.suffix_automaton.enhancer import follow_rows
from specbuild.methods.suffix_automaton.pool import SuffixAutomatonPool
from specbuild.reference.decoder.batch import Batch
from specbuild.reference.decoder.methods import Decoder, StepOutput
from specbuild.reference.decoder.verify import verify_drafts

MAX_NGRAM = "max_matching_ngram_size"
GLOBAL_POOL = "enable_global_pool"
POOL_SIZE = "global_pool_size"


class SuffixAutomatonDecoder(Decoder):
    name = "suffix_automaton"
    engine_mode = SpecMode.DRAFT_TOKENS_EXTERNAL
    reuses_prefix = True

    def __init__(self, engine, draft_engine=None, decoding=None):
        super().__init__(engine, draft_engine, decoding)
        self.max_draft_len = self.option("max_draft_len", engine.limits.max_draft_len, minimum=1)
        ngram = self.option(MAX_NGRAM, LONGEST)
        size = self.decoding.get(POOL_SIZE)
        try:
            self.pool = SuffixAutomatonPool(
                max_batch_size=engine.limits.max_batch_size,
                max_matching_ngram_size=ngram,
                enable_global_pool=bool(self.decoding.get(GLOBAL_POOL, False)),
                global_pool_size=None if size is None else int(size),
            )
        except ValueError as exc:
            raise UserError(f"{self.where()}: {exc}") from None

    def step(self, batch: Batch) -> list[StepOutput]:
        follow_rows(self.pool, batch.seqs)
        drafts = [
            list(self.pool.draft(seq.request_id, seq.draft_budget(self.capped(self.max_draft_len))).tokens)
            for seq in batch.seqs
        ]
        return verify_drafts(batch, self.target, drafts)
