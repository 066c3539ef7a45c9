"""PARD on the reference executor (parallel draft, arXiv 2504.18583; TensorRT-LLM's `PARD` decoding type,
tensorrt_llm/_torch/speculative/pard.py@80aa8ca `PARDWorker`); the same steps as reference/decoder/pard.py's plain
function, batched through the executor's caches.

Each step, per row:
    draft:   one forward of the draft model over the tokens its cache lacks (the bonus token, and what the last step
             accepted) followed by K - 1 mask tokens; the logits at the last real token and at each mask are the K
             drafts (argmax over the draft's vocabulary without the mask id); the draft keeps the real tokens' KV and
             drops the masks' (upstream's kv_lens rewind);
    verify:  one target forward over [last token, drafts]; accept: the drafts as a deterministic proposal (greedy =
             token comparison, lossless under sampling: upstream's one-model path drafts greedily too).
Engine `specbuild.decoding` keys: `max_draft_len` (K), `mask_token_id` (the draft's mask token,
methods/pard/checkpoint.py says which: pard_token, mask_token_id, vocab_size of its config). The draft engine's
vocabulary is the target's plus at most the mask id (`draft_extra_ids`).
"""

from __future__ import annotations

from specbuild.errors import UserError
from specbuild.facts.engine_facts import SpecMode
from specbuild.reference.decoder.batch import Batch
from specbuild.reference.decoder.methods import Decoder, StepOutput
from specbuild.reference.decoder.verify import verify_chain

MASK_TOKEN_ID = "mask_token_id"


class Pard(Decoder):
    name = "pard"
    engine_mode = SpecMode.DRAFT_TOKENS_EXTERNAL
    needs_draft_engine = True
    draft_extra_ids = 1  # the mask token may be one id past the target's vocabulary
    reuses_prefix = True
    drafting = "propose"

    def __init__(self, engine, draft_engine=None, decoding=None):
        super().__init__(engine, draft_engine, decoding)
        if draft_engine is None:
            raise ValueError("pard needs a draft engine")
        self.draft = draft_engine.model
        self.k = self.option("max_draft_len", engine.limits.max_draft_len, minimum=1)
        self.mask = self.option(MASK_TOKEN_ID, self.draft.vocab_size - 1, minimum=0)
        if self.mask >= self.draft.vocab_size:
            raise UserError(
                f"{self.where(MASK_TOKEN_ID)}={self.mask} is outside the draft's vocabulary "
                f"[0, {self.draft.vocab_size}): every PARD step feeds the mask token to the draft"
            )

    def prefill(self, batch: Batch) -> list[StepOutput]:
        batch.feed("draft", self.draft, logits="none")
        batch.caches["draft"].commit_all()
        return super().prefill(batch)

    def step(self, batch: Batch) -> list[StepOutput]:
        k = [seq.draft_budget(self.capped(self.k)) for seq in batch.seqs]
        drafts, n_real = self.propose(batch, k)
        out = batch.feed("target", self.target, drafts)  # verify: [last token, drafts] per row
        outputs, keep = [], []
        for r, seq in enumerate(batch.seqs):
            acceptance = verify_chain(seq, out.tail(r, k[r] + 1), drafts[r], draft_probs=None)
            outputs.append(StepOutput.of(acceptance, drafted=k[r]))
            keep.append(out.n_new[r] - k[r] + len(acceptance.nodes))
        batch.caches["target"].commit_prefix(keep)
        batch.caches["draft"].commit_prefix(n_real)
        return outputs

    def propose(self, batch: Batch, k: list[int]) -> tuple[list[list[int]], list[int]]:
        """K drafts per row from one draft forward; returns them and how many real tokens each row fed (its
        uncached tokens: what the draft cache keeps). A row with k = 0 feeds its real tokens only."""
        masks = [[self.mask] * max(0, n - 1) for n in k]
        out = self.draft.forward(batch.caches["draft"], [u + m for u, m in zip(batch.uncached("draft"), masks)])
        drafts, n_real = [], []
        for r in range(len(batch.seqs)):
            real = out.n_new[r] - len(masks[r])
            n_real.append(real)
            if not k[r]:
                drafts.append([])
                continue
            logits = out.logits[r, real - 1 : real - 1 + k[r]].clone()
            logits[:, self.mask] = float("-inf")
            drafts.append(logits.argmax(-1).tolist())
        return drafts, n_real


METHOD = Pard
