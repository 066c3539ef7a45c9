"""Verifying a request's drafts against the target's logits: chains (draft-target, prompt lookup, external
drafts) and trees (Medusa, EAGLE, lookahead), through the one acceptance core in `acceptance.py`.

Greedy requests take the request's argmax at every node (bad words masked given that node's own context) and keep
the longest matching path; sampled requests use recursive rejection sampling with the request's sampling
transforms applied identically to the target (p) and, when given, the proposal (q). A chain x_1..x_k is the tree
`chain_tree(k)`: its rejection sampling is exactly Leviathan/Chen speculative sampling

    for i in 1..k: accept x_i with probability min(1, p_i(x_i) / q_i(x_i)); on rejection emit a sample from
                   norm(max(0, p_i - q_i)) and stop
    if all k were accepted: emit a bonus sample from p_{k+1}

and a deterministic proposal (prompt lookup, drafts without logits) is q_i = one-hot(x_i).
"""

from __future__ import annotations

from typing import Sequence as Seq

import torch

from specbuild.reference import sampling
from specbuild.reference.acceptance import Acceptance, greedy_accept, sample_accept
from specbuild.reference.sequence import Sequence
from specbuild.reference.tree.shape import Tree, chain_tree, path_tokens


def verify_tree(seq: Sequence, tree: Tree, tokens: Seq[int], logits: torch.Tensor,
                proposal_probs: torch.Tensor | None = None) -> Acceptance:
    """Verify one row's tree against the target's logits at its nodes ([tree.size, V]; tokens[0] is the root).

    proposal_probs: None when the candidates are a deterministic function of the context (every tree the runtime
    builds: top-k of heads, n-grams), else [tree.size, V] with row c the distribution node c was drawn from.
    """
    bad_words = bool(seq.request.bad_words)
    if seq.greedy:
        if bad_words:
            argmax = [seq.choose(logits[i], path_tokens(tree, tokens, i)) for i in range(tree.size)]
        else:
            argmax = logits.argmax(-1).tolist()
        return greedy_accept(tree, tokens, argmax)
    if bad_words:
        probs = torch.stack([seq.distribution(logits[i], path_tokens(tree, tokens, i)) for i in range(tree.size)])
    else:
        probs = sampling.probabilities(logits, seq.sampling)
    return sample_accept(tree, tokens, probs, generator=seq.generator, proposal_probs=proposal_probs)


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
    proposal = None
    if draft_probs is not None and not seq.greedy:  # row c = q of node c (node 0, the root, is not a candidate)
        proposal = torch.cat([draft_probs.new_zeros(1, draft_probs.shape[-1]), draft_probs[:k]])
    accepted = verify_tree(seq, chain_tree(k), [-1, *drafts], target_logits, proposal)
    return accepted.new_tokens, len(accepted.nodes)
