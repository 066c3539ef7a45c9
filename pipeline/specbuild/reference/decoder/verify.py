"""Verifying a request's drafts against the target's logits: chains (draft-target, prompt lookup, external
drafts) and trees (Medusa, EAGLE, lookahead), through the one acceptance core in `acceptance.py`.

Greedy requests take the request's argmax at every node (bad words, min_tokens and penalties given that node's own
context: the tokens so far and the drafts above it) and keep the longest matching path; sampled requests use
recursive rejection sampling with the request's sampling transforms applied identically to the target (p) and,
when given, the proposal (q). A chain x_1..x_k is the tree
`chain_tree(k)`: its rejection sampling is exactly Leviathan/Chen speculative sampling

    for i in 1..k: accept x_i with probability min(1, p_i(x_i) / q_i(x_i)); on rejection emit a sample from
                   norm(max(0, p_i - q_i)) and stop
    if all k were accepted: emit a bonus sample from p_{k+1}

and a deterministic proposal (prompt lookup, drafts without logits) is q_i = one-hot(x_i).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Sequence as Seq

import torch

from specbuild.reference.decoder import sampling
from specbuild.reference.decoder.acceptance import Acceptance, greedy_accept, sample_accept
from specbuild.reference.decoder.sequence import Sequence
from specbuild.reference.decoder.methods import StepOutput
from specbuild.reference.decoder.tree.shape import Tree, chain_tree, path_tokens

if TYPE_CHECKING:
    from specbuild.reference.decoder.batch import Batch


def verify_tree(
    seq: Sequence, tree: Tree, tokens: Seq[int], logits: torch.Tensor, proposal_probs: torch.Tensor | None = None
) -> Acceptance:
    """Verify one row's tree against the target's logits at its nodes ([tree.size, V]; tokens[0] is the root).

    Every node's distribution is the request's given that node's own context: the tokens so far plus the draft
    tokens on its path (bad words, the end id before min_tokens, the penalties), so greedy acceptance reproduces
    greedy decoding with the same settings and rejection sampling keeps the penalised target distribution.
    proposal_probs: None when the candidates are a deterministic function of the context (every tree the runtime
    builds: top-k of heads, n-grams), else [tree.size, V] with row c the distribution node c was drawn from.
    """
    processed = None
    if seq.context_dependent:
        processed = seq.processed(logits, [path_tokens(tree, tokens, i) for i in range(tree.size)])
    if seq.greedy:
        argmax = (logits if processed is None else processed).argmax(-1).tolist()
        acceptance = greedy_accept(tree, tokens, argmax)
    else:
        if processed is None:
            processed = sampling.scale(logits, seq.sampling)
        probs = sampling.distribution(processed, seq.sampling)
        acceptance = sample_accept(tree, tokens, probs, generator=seq.generator, proposal_probs=proposal_probs)
    return with_log_probs(seq, tree, tokens, logits, acceptance)


def with_log_probs(
    seq: Sequence, tree: Tree, tokens: Seq[int], logits: torch.Tensor, acceptance: Acceptance
) -> Acceptance:
    """The acceptance with the log probability of each new token under the target at the node it follows (the
    target's own distribution there, also for a token drawn from a residual: it is distributed as p), when the
    request asks for log probs."""
    if not seq.request.return_log_probs:
        return acceptance
    nodes = list(acceptance.emitting_nodes)
    found = seq.token_log_probs(logits[nodes], acceptance.new_tokens, [path_tokens(tree, tokens, n) for n in nodes])
    return replace(acceptance, log_probs=tuple(found))


def verify_chain(
    seq: Sequence,
    target_logits: torch.Tensor,
    drafts: Seq[int],
    draft_probs: torch.Tensor | None = None,
) -> Acceptance:
    """Verify a chain of drafts: the accepted drafts, the correction or bonus token (`new_tokens`) and, when asked
    for, their log probabilities.

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
    return verify_tree(seq, chain_tree(k), [-1, *drafts], target_logits, proposal)


def verify_drafts(batch: Batch, target, drafts: list[list[int]]) -> list[StepOutput]:
    """Verify each row's chain of drafts in one forward of `target` over [last token, drafts], accept its longest
    agreeing prefix and then the target's token (verify_chain: greedy or sampled), and keep their KV."""
    out = batch.feed("target", target, drafts)
    outputs, keep = [], []
    for r, seq in enumerate(batch.seqs):
        k = len(drafts[r])
        acceptance = verify_chain(seq, out.tail(r, k + 1), drafts[r], draft_probs=None)
        outputs.append(StepOutput.of(acceptance, drafted=k))
        keep.append(out.n_new[r] - k + len(acceptance.nodes))
    batch.caches["target"].commit_prefix(keep)
    return outputs
