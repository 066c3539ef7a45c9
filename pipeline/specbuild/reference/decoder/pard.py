"""PARD decoding (parallel draft, arXiv 2504.18583) as one plain function over two `CausalLM`s: greedy, batched,
lossless (the output is the target's own greedy decoding, token for token).

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

from specbuild.reference.decoder.model import CausalLM


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
