"""`echo` on the reference runtime: each step drafts what followed the last token's previous occurrence, verified
with the target's forward over [last token, drafts] (a chain: lossless, greedy = token comparison). The pack's
decoder plugs into the reference runtime's framework (Decoder, Batch, verify_chain) and keeps the model plumbing
out of the algorithm."""

from __future__ import annotations

from specbuild.facts.engine_facts import SpecMode
from specbuild.reference.decoder.batch import Batch
from specbuild.reference.decoder.methods import Decoder, StepOutput
from specbuild.reference.decoder.verify import verify_drafts
from specbuild.standalone.prompt_lookup_drafts import propose


class EchoDecoder(Decoder):
    name = "echo"
    engine_mode = SpecMode.DRAFT_TOKENS_EXTERNAL  # drafts made outside the target's own heads
    reuses_prefix = True

    def __init__(self, engine, draft_engine=None, decoding=None):
        super().__init__(engine, draft_engine, decoding)
        self.k = self.option("max_draft_len", engine.limits.max_draft_len, minimum=1)

    def step(self, batch: Batch) -> list[StepOutput]:
        # draft: the tokens after the last token's previous occurrence (a 1-gram match)
        drafts = [propose(seq.tokens, 1, seq.draft_budget(self.capped(self.k))) for seq in batch.seqs]
        return verify_drafts(
            batch, self.target, drafts
        )  # verify and accept: one target forward over [last token, drafts]
