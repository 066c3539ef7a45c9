"""PARD on the reference executor (parallel draft, arXiv 2504.18583; TensorRT-LLM's `PARD` decoding type,
tensorrt_llm/_torch/speculative/pard.py@80aa8ca `PARDWorker`); the same steps as `pard_generate`
(below, the plain function), batched through the executor's caches.

Each step, per row:
    draft:   one forward of the draft model over the tokens its cache lacks (the bonus token, and what the last step
             accepted) followed by K - 1 mask tokens; the logits at the last real token and at each mask are the K
             drafts (argmax over the draft's vocabulary without the mask id); the draft keeps the real tokens' KV and
             drops the masks' (upstream's kv_lens rewind);
    verify:  one target forward over [last token, drafts]; accept: the drafts as a deterministic proposal (greedy =
             token comparison, lossless under sampling: upstream's one-model path drafts greedily too).
Engine `specbuild.decoding` keys: `max_draft_len` (K), `mask_token_id` (the draft's mask token,
checkpoint.py of this pack says which: pard_token, mask_token_id, vocab_size of its config). The draft engine's
vocabulary is the target's plus at most the mask id (`draft_extra_ids`).

`pard_generate`: PARD decoding as one plain function over two `CausalLM`s: greedy, batched, lossless (the output is
the target's own greedy decoding, token for token).

It follows TensorRT-LLM's worker (tensorrt_llm/_torch/speculative/pard.py@80aa8ca `PARDWorker`):
- prefill: the target reads each prompt and gives the first token;
- draft: one forward of the draft model over the tokens it has not read yet (the prompt the first time, then the
  tokens the last step accepted, its bonus token included) followed by K - 1 mask tokens at the next positions; the
  logits at the last real token and at each mask are the K drafts (argmax). The draft keeps the real tokens' KV and
  drops the masks' (upstream rewinds kv_lens after the draft forward, `_apply_kv_rewind_after_draft`);
- verify: the target reads the last accepted token and the K drafts in one forward; the longest prefix of drafts
  equal to the target's argmax is accepted, then the target's own next token (the bonus);
- the mask token is never proposed: its logit is excluded from the draft argmax (upstream takes a plain argmax over
  the draft's vocabulary, whose extra mask row a trained draft scores low; a mask id sent to the target would be
  outside its vocabulary).
Stops at `end_id` (the end token is emitted) or after `max_new_tokens`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import torch

from specbuild.errors import UserError
from specbuild.facts.engine_facts import SpecMode
from specbuild.reference.decoder.batch import Batch
from specbuild.reference.decoder.methods import Decoder, StepOutput
from specbuild.reference.decoder.verify import verify_drafts
from specbuild.reference.decoder.model import CausalLM

MASK_TOKEN_ID = "mask_token_id"


class PardDecoder(Decoder):
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
        outputs = verify_drafts(batch, self.target, drafts)
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


# --- the plain function --------------------------------------------------------------------------------------------
@dataclass
class PardResult:
    """Per row: the generated tokens, and the drafting counters (steps = verification forwards)."""

    outputs: list[list[int]]
    drafted: list[int] = field(default_factory=list)
    accepted: list[int] = field(default_factory=list)
    steps: list[int] = field(default_factory=list)
    accepted_per_step: list[list[int]] = field(default_factory=list)


def draft_positions(n_real: int, k: int) -> slice:
    """Where a row's K drafts come from in a draft forward over n_real real tokens and K - 1 masks: the last real
    token (index n_real - 1) and each mask after it."""
    return slice(n_real - 1, n_real - 1 + k)


@torch.inference_mode()
def pard_generate(
    target: CausalLM,
    draft: CausalLM,
    prompts: Sequence[Sequence[int]],
    *,
    max_new_tokens: int,
    max_draft_len: int,
    mask_token_id: int,
    end_id: int | None = None,
) -> PardResult:
    if max_draft_len < 1:
        raise ValueError(f"max_draft_len must be > 0 for PARD; got {max_draft_len}")
    if not 0 <= mask_token_id < draft.vocab_size:
        raise ValueError(f"mask_token_id {mask_token_id} is outside the draft's vocabulary [0, {draft.vocab_size})")
    k, rows = max_draft_len, len(prompts)
    texts = [list(map(int, p)) for p in prompts]
    if any(not t for t in texts):
        raise ValueError("every prompt needs at least one token")
    result = PardResult([[] for _ in texts], [0] * rows, [0] * rows, [0] * rows, [[] for _ in texts])
    target_cache, draft_cache = target.new_cache(rows), draft.new_cache(rows)
    first = target.forward(target_cache, texts, logits="last").logits.argmax(-1).tolist()
    target_cache.commit_all()
    active = [True] * rows
    for r, token in enumerate(first):
        active[r] = _emit(result.outputs[r], texts[r], [token], max_new_tokens, end_id)

    while any(active):
        unread = [texts[r][draft_cache.lengths[r] :] if active[r] else [] for r in range(rows)]
        out = draft.forward(draft_cache, [u + [mask_token_id] * (k - 1) if u else [] for u in unread])
        drafts: list[list[int]] = [[] for _ in range(rows)]
        for r in range(rows):
            if active[r]:
                logits = out.logits[r, draft_positions(len(unread[r]), k)].clone()
                logits[:, mask_token_id] = float("-inf")
                drafts[r] = logits.argmax(-1).tolist()
        draft_cache.commit_prefix([len(u) for u in unread])  # the real tokens' KV; the masks' is dropped

        fed = [[texts[r][-1], *drafts[r]] if active[r] else [] for r in range(rows)]
        verify = target.forward(target_cache, fed)
        keep = [0] * rows
        for r in range(rows):
            if not active[r]:
                continue
            greedy = verify.logits[r, : k + 1].argmax(-1).tolist()
            n = 0
            while n < k and drafts[r][n] == greedy[n]:
                n += 1
            keep[r] = 1 + n  # the last token's KV and the accepted drafts'
            result.steps[r] += 1
            result.drafted[r] += k
            result.accepted[r] += n
            result.accepted_per_step[r].append(n)
            active[r] = _emit(result.outputs[r], texts[r], drafts[r][:n] + [greedy[n]], max_new_tokens, end_id)
        target_cache.commit_prefix(keep)
    return result


def _emit(output: list[int], text: list[int], tokens: list[int], budget: int, end_id: int | None) -> bool:
    """Append tokens up to the budget and the end token; whether the row goes on."""
    for token in tokens:
        output.append(token)
        text.append(token)
        if len(output) >= budget or token == end_id:
            return False
    return True
