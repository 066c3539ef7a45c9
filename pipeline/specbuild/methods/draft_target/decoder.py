"""Draft-target speculative decoding (Leviathan et al. 2023; Chen et al. 2023).

Each step, for every sequence:
    draft:   the small model proposes k tokens autoregressively, x_i ~ q_i (the request's sampling transforms,
             penalties and min_tokens included, on the draft's logits: q is as close to p as the draft allows)
    verify:  one target forward over [last token, x_1..x_k] gives p_1..p_{k+1}
    accept:  x_i with probability min(1, p_i(x_i) / q_i(x_i)); on the first rejection sample norm(max(0, p_i - q_i));
             if all k are accepted, a bonus token from p_{k+1}. Greedy = token comparison.
Engine `specbuild.decoding` keys: `num_draft_tokens` (k, default max_draft_len), `draft_vocab_size` (N: the draft
model scores only the token ids [0, N), see `drafters.DraftVocabHead`; default the whole vocabulary).
The draft's cache keeps what the target accepted; a draft token it never fed (x_k after full acceptance) is fed
at the next step together with the new last token.
"""

from __future__ import annotations

import torch

from specbuild.facts.engine_facts import SpecMode
from specbuild.reference.decoder import sampling
from specbuild.reference.decoder.batch import Batch
from specbuild.reference.decoder.drafters import DraftVocabHead, draft_vocab_size
from specbuild.reference.decoder.methods import Decoder, StepOutput
from specbuild.reference.decoder.verify import verify_chain


class DraftTargetDecoder(Decoder):
    name = "draft_target"
    engine_mode = SpecMode.DRAFT_TOKENS_EXTERNAL
    needs_draft_engine = True
    reuses_prefix = True
    drafting = "propose"

    def __init__(self, engine, draft_engine=None, decoding=None):
        super().__init__(engine, draft_engine, decoding)
        if draft_engine is None:
            raise ValueError("draft_target needs a draft engine")
        self.draft = draft_engine.model
        self.k = self.option("num_draft_tokens", engine.limits.max_draft_len, minimum=1)
        # `draft_vocab_size`: the draft scores only the token ids [0, N) (drafters.DraftVocabHead; lossless)
        where = self.where()
        n = draft_vocab_size(self.decoding, self.draft.vocab_size, where)
        self.draft_head = DraftVocabHead(self.draft.lm_head.weight, n) if n < self.draft.vocab_size else None

    def prefill(self, batch: Batch) -> list[StepOutput]:
        batch.feed("draft", self.draft, logits="none")
        batch.caches["draft"].commit_all()
        return super().prefill(batch)

    def step(self, batch: Batch) -> list[StepOutput]:
        k = [seq.draft_budget(self.capped(self.k)) for seq in batch.seqs]
        drafts, q, n_uncached_draft = self.propose(batch, k)
        out = batch.feed("target", self.target, drafts)  # verify: [last token, x_1..x_k] per row

        outputs, keep_target, keep_draft = [], [], []
        for r, seq in enumerate(batch.seqs):
            acceptance = verify_chain(seq, out.tail(r, k[r] + 1), drafts[r], q[r])
            accepted = len(acceptance.nodes)
            outputs.append(StepOutput.of(acceptance, drafted=k[r]))
            keep_target.append(out.n_new[r] - k[r] + accepted)  # uncached tokens + accepted drafts
            # The draft fed its uncached tokens, then x_1..x_{k-1}: keep those and the accepted drafts among them.
            keep_draft.append(n_uncached_draft[r] + min(accepted, k[r] - 1) if k[r] else 0)
        batch.caches["target"].commit_prefix(keep_target)
        batch.caches["draft"].commit_prefix(keep_draft)
        return outputs

    def propose(self, batch: Batch, k: list[int]):
        """Sample k[r] draft tokens per row autoregressively from the draft model.

        Returns (drafts, q, n_uncached): q[r] is [k[r], V] (None when greedy); n_uncached[r] is how many
        not-yet-cached tokens row r fed before its drafts."""
        cache = batch.caches["draft"]
        drafts: list[list[int]] = [[] for _ in batch.seqs]
        q: list[list[torch.Tensor]] = [[] for _ in batch.seqs]
        uncached = batch.uncached("draft")  # 1 token, or 2 after a full acceptance
        for i in range(max(k, default=0)):
            feed = [([] if k[r] <= i else uncached[r] if i == 0 else [drafts[r][-1]]) for r in range(len(batch.seqs))]
            out = self.draft.forward(cache, feed, logits="last", head=self.draft_head)
            for r, seq in enumerate(batch.seqs):
                if k[r] <= i:
                    continue
                if seq.greedy:
                    drafts[r].append(seq.choose(out.logits[r], drafts[r]))
                else:
                    q_i = seq.distribution(out.logits[r], drafts[r])
                    q[r].append(q_i)
                    drafts[r].append(sampling.sample(q_i, seq.generator))
        n_uncached = [len(uncached[r]) if k[r] else 0 for r in range(len(batch.seqs))]
        return drafts, [torch.stack(rows) if rows else None for rows in q], n_uncached
