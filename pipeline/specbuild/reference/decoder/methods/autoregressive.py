"""Autoregressive decoding: one target forward per token. The baseline every other method must match."""

from __future__ import annotations

from specbuild.facts.engine_facts import SpecMode
from specbuild.reference.decoder.batch import Batch
from specbuild.reference.decoder.methods import Decoder, StepOutput, next_token


class AutoregressiveDecoder(Decoder):
    name = "autoregressive"
    engine_mode = SpecMode.NONE
    reuses_prefix = True
    step_is_prefill = True  # one forward over each row's uncached tokens, the next token from the last

    # prefill: Decoder.prefill (one forward over the prompt, first token from its last position)

    def step(self, batch: Batch) -> list[StepOutput]:
        out = batch.feed("target", self.target, logits="last")  # each row feeds its last token
        batch.caches["target"].commit_all()
        return [next_token(seq, out.logits[r]) for r, seq in enumerate(batch.seqs)]


DECODER = AutoregressiveDecoder
