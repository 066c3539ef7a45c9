"""Verifying a chain of draft tokens against the target: speculative sampling (Leviathan et al. 2023,
Chen et al. 2023), shared by draft-target, prompt lookup and external drafts.

Given the target's logits at the k+1 positions after the context (one per draft token, plus the bonus position)
and the k drafts x_1..x_k with their proposal distributions q_i:

    for i in 1..k:
        accept x_i with probability min(1, p_i(x_i) / q_i(x_i))
        on rejection: emit a sample from norm(max(0, p_i - q_i)) and stop
    if all k were accepted: emit a bonus sample from p_{k+1}

The emitted tokens are distributed exactly as sampling from the target alone. A deterministic proposal (prompt
lookup, drafts without logits) is q_i = one-hot(x_i): accept with probability p_i(x_i), else sample from p_i
with x_i removed. Greedy requests compare tokens: accept while x_i == argmax p_i.
"""

from __future__ import annotations

from typing import Sequence as Seq

import torch

from specbuild.reference import sampling
from specbuild.reference.sequence import Sequence


def verify_chain(
    seq: Sequence,
    target_logits: torch.Tensor,
    drafts: Seq[int],
    draft_probs: torch.Tensor | None = None,
) -> tuple[list[int], int]:
    """Return (emitted tokens, number of drafts accepted).

    target_logits: [k+1, V], position i predicts the token after tokens + drafts[:i].
    draft_probs: [k, V] proposal distributions q_i (already transformed by the request's sampling config), or
        None for a deterministic proposal.
    """
    k = len(drafts)
    if target_logits.shape[0] != k + 1:
        raise ValueError(f"{target_logits.shape[0]} target positions for {k} drafts (need k + 1)")

    if seq.greedy:
        accepted = 0
        for i, x in enumerate(drafts):
            if seq.choose(target_logits[i], drafts[:i]) != x:
                break
            accepted += 1
        return list(drafts[:accepted]) + [seq.choose(target_logits[accepted], drafts[:accepted])], accepted

    p = seq.probs(target_logits, drafts)  # [k+1, V]
    for i, x in enumerate(drafts):
        q_i = draft_probs[i] if draft_probs is not None else None
        if q_i is None or q_i[x] <= 0:  # deterministic proposal (or drafts inconsistent with their logits)
            q_i = _one_hot(x, p.shape[-1])
        if sampling.uniform(seq.generator) < min(1.0, float(p[i, x] / q_i[x])):
            continue
        correction = sampling.sample(sampling.residual(p[i], q_i), seq.generator)
        return list(drafts[:i]) + [correction], i
    return list(drafts) + [sampling.sample(p[k], seq.generator)], k


def _one_hot(token: int, vocab: int) -> torch.Tensor:
    q = torch.zeros(vocab)
    q[token] = 1.0
    return q
