"""Accepting draft tokens: one core for chains and trees (a chain of k drafts is `chain_tree(k)`).

Given the target's next-token distribution at every node of a draft tree (node 0 = the root, the last decided
token; a chain's nodes are its drafts in order):
- `greedy_accept`: walk down from the root, following a child whose token equals the target's argmax at its
  parent; with several matching children take the one that leads furthest. The bonus token is the target's argmax
  at the last accepted node. This reproduces greedy autoregressive decoding exactly.
- `sample_accept`: recursive (multi-candidate) rejection sampling. At a node with target distribution p, try its
  children in order; child token x proposed from q is accepted with probability min(1, p(x)/q(x)); on rejection
  p <- norm(max(0, p - q)) and the next sibling is tried; if all are rejected the bonus token is drawn from the
  final p. For deterministic candidates (a token chosen as a function of the context: a draft model's top-k, an
  n-gram, a prompt-lookup match, drafts sent without logits) q is the point mass on x: accept with probability
  p(x), else remove x from p (simply "draw from p and see whether the draw is x", so it is valid for *any*
  candidates chosen independently of this step's coins). Each emitted token is then distributed exactly as p.
  For a chain this is speculative sampling (Leviathan et al. 2023; Chen et al. 2023); for trees SpecInfer (Miao
  et al. 2024), EAGLE, Recursive Speculative Decoding (Jeon et al. 2024).

`specbuild.reference.decoder.verify` applies these to a request (its sampling settings, bad words); this module works on
plain distributions and imports torch only inside functions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from specbuild.reference.decoder.tree.shape import Tree


@dataclass(frozen=True)
class Acceptance:
    """Outcome of verifying one row's tree: the accepted draft nodes (root excluded, root-to-leaf order),
    their tokens, and the bonus token the target produced after the last accepted node. log_probs: when the
    request asks for them, one per new token: its log probability under the target's distribution at the node
    it follows (the root, then each accepted node), `sampling.TokenLogProb`."""

    nodes: tuple[int, ...]
    tokens: tuple[int, ...]
    bonus: int
    log_probs: tuple | None = None

    @property
    def last_node(self) -> int:
        return self.nodes[-1] if self.nodes else 0

    @property
    def emitting_nodes(self) -> tuple[int, ...]:
        """The node each new token follows: the root for the first, then each accepted node."""
        return (0, *self.nodes)

    @property
    def new_tokens(self) -> list[int]:
        """Accepted draft tokens followed by the bonus token (what the request emits this step)."""
        return [*self.tokens, self.bonus]


def greedy_accept(tree: "Tree", tokens: Sequence[int], target_argmax: Sequence[int]) -> Acceptance:
    """Longest root-to-node path whose every token equals the target's argmax at its parent.

    tokens[i]: token at node i (tokens[0], the root, is ignored); target_argmax[i]: the target's argmax of
    the next-token distribution after node i's prefix.
    """
    tokens = list(tokens)
    target_argmax = list(target_argmax)
    nodes = _longest_accepted(tree, tokens, target_argmax, 0)
    last = nodes[-1] if nodes else 0
    return Acceptance(nodes=nodes, tokens=tuple(tokens[n] for n in nodes), bonus=int(target_argmax[last]))


def _longest_accepted(tree: "Tree", tokens: list[int], target_argmax: list[int], node: int) -> tuple[int, ...]:
    """The longest path below `node` whose every token equals the target's argmax at its parent (a module function:
    a nested recursive one refers to itself through its closure, a reference cycle per verification)."""
    best: tuple[int, ...] = ()
    for child in tree.children[node]:
        if tokens[child] == target_argmax[node]:
            below = (child,) + _longest_accepted(tree, tokens, target_argmax, child)
            if len(below) > len(best):
                best = below
    return best


def accept_or_residual(p: "torch.Tensor", token: int, q: "torch.Tensor | None") -> tuple[float, "torch.Tensor"]:
    """One step of speculative sampling for a candidate `token` drawn from q (None, or q(token) = 0: chosen
    deterministically, i.e. q is the point mass on it).

    Returns (probability of accepting `token`, distribution to use if it is rejected): min(1, p(x)/q(x)) and
    `sampling.residual(p, q)` = norm(max(0, p - q)) (p itself when that is empty, which only happens when
    rejection has probability 0).
    """
    import torch

    from specbuild.reference.decoder import sampling

    if q is None or float(q[token]) <= 0.0:
        q = torch.zeros_like(p)
        q[token] = 1.0
    accept = min(1.0, float(p[token]) / float(q[token]))
    return accept, sampling.residual(p, q)


def sample_accept(
    tree: "Tree",
    tokens: Sequence[int],
    target_probs: "torch.Tensor",
    generator: "torch.Generator | None" = None,
    proposal_probs: "torch.Tensor | None" = None,
) -> Acceptance:
    """Recursive rejection sampling down the tree; every emitted token is distributed as the target's p.

    target_probs: (tree.size, V) target next-token distributions (after temperature/top-k/top-p) at each
        node. proposal_probs: None when every candidate token is a deterministic function of the context
        (top-k drafts, n-grams); else (tree.size, V) where row c is the distribution node c's token was
        drawn from *given its earlier siblings* (for draws without replacement: the draft distribution with
        earlier siblings removed, renormalised; for i.i.d. draws: the same draft distribution). Row 0 is unused.
    """
    import torch

    tokens = [int(t) for t in tokens]
    node = 0
    nodes: list[int] = []
    while True:
        p = target_probs[node].to(torch.float64)
        accepted_child = None
        for child in tree.children[node]:
            q = None if proposal_probs is None else proposal_probs[child].to(torch.float64)
            accept, residual = accept_or_residual(p, tokens[child], q)
            if float(torch.rand((), generator=generator, dtype=torch.float64)) < accept:
                accepted_child = child
                break
            p = residual
        if accepted_child is None:
            bonus = int(torch.multinomial(p.to(torch.float32), 1, generator=generator))
            return Acceptance(nodes=tuple(nodes), tokens=tuple(tokens[n] for n in nodes), bonus=bonus)
        nodes.append(accepted_child)
        node = accepted_child
