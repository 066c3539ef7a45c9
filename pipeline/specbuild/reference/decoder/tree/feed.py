"""Running token trees through the reference runtime (shared by Medusa, EAGLE and lookahead): one target forward
over every row's uncached tokens followed by its tree, then keeping each row's accepted path in the cache."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

from specbuild.reference.decoder.tree.shape import Tree, chain_tree

if TYPE_CHECKING:  # pragma: no cover
    from specbuild.reference.decoder.acceptance import Acceptance
    from specbuild.reference.decoder.batch import Batch
    from specbuild.reference.decoder.model import CausalLM, ForwardOutput


@dataclass
class RowTree:
    """One row's draft for a step: the tree and its node tokens (tokens[0] is the root: the row's last,
    not yet cached token)."""

    tree: Tree
    tokens: list[int]

    @classmethod
    def chain(cls, root: int, drafts: Sequence[int]) -> RowTree:
        """A linear draft after `root` (the sa_config enhancer's replacement of a drafter's chain)."""
        return cls(chain_tree(len(drafts)), [root, *drafts])


def feed_trees(
    batch: "Batch",
    model: "CausalLM",
    drafts: Sequence[RowTree],
    cache: str = "target",
    capture_layers: Sequence[int] | None = None,
) -> tuple["ForwardOutput", list[int]]:
    """One forward of `model` over every row's uncached tokens followed by its tree's draft nodes.

    The last uncached token is the tree root; a node at depth d sits at the root's position + d and sees the
    committed context, the uncached tokens before the root, and its own ancestors (the tree attention mask).
    Returns the forward output (logits of every fed token; `captured` layer outputs with `capture_layers`) and,
    per row, the index of the root among the fed tokens: node i of row r is fed token `roots[r] + i`.
    """
    import torch

    kv = batch.cache(cache, model)
    uncached = batch.uncached(cache)
    tokens, positions, attend, roots = [], [], [], []
    for r, draft in enumerate(drafts):
        u = len(uncached[r])
        if u < 1 or uncached[r][-1] != draft.tokens[0]:
            raise RuntimeError(f"row {r}: the tree root must be the row's last, uncached token")
        root, start, size = u - 1, kv.lengths[r], draft.tree.size
        tokens.append(list(uncached[r]) + list(draft.tokens[1:]))
        positions.append(list(range(start, start + u)) + [start + root + d for d in draft.tree.depths[1:]])
        if u == 1:  # the usual case: the root is the only uncached token
            sees = draft.tree.ancestor_matrix()
        else:
            n = u + size - 1
            sees = torch.zeros(n, n, dtype=torch.bool)
            sees[:u, :u] = torch.ones(u, u, dtype=torch.bool).tril()
            sees[root:, :root] = True
            sees[root:, root:] = draft.tree.ancestor_matrix()
        attend.append(sees)
        roots.append(root)
    return model.forward(
        kv, tokens, positions=positions, attend=attend, logits="all", capture_layers=capture_layers
    ), roots


def commit_paths(batch: "Batch", roots: Sequence[int], accepted: Sequence["Acceptance"], cache: str = "target") -> None:
    """Keep, per row, the tokens fed before the root, the root, and the accepted path (only the accepted entries
    that do not already sit at their position move)."""
    batch.caches[cache].commit(
        [list(range(root + 1)) + [root + n for n in acc.nodes] for root, acc in zip(roots, accepted)]
    )
