"""The sequences decoded together, and the KV caches of every model that reads them (row-aligned).

A method names its caches ("target", "draft", "eagle", ...); the executor moves their rows together when
requests leave (`select`) or join (`extend`). Invariant between steps: each cache holds a prefix of each row's
`seq.tokens` with nothing pending; usually all tokens but the last (the next forward's first input).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Sequence as Seq

import torch

from specbuild.reference.decoder.kv_cache import KVCache
from specbuild.reference.decoder.model import CausalLM, ForwardOutput
from specbuild.reference.decoder.sequence import Sequence


@dataclass
class Batch:
    seqs: list[Sequence]
    caches: dict[str, KVCache] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.seqs)

    def cache(self, name: str, model: CausalLM) -> KVCache:
        """The named cache, created empty (for rows that were just admitted) if the batch has none yet."""
        if name not in self.caches:
            self.caches[name] = model.new_cache(len(self.seqs))
        return self.caches[name]

    def uncached(self, name: str) -> list[list[int]]:
        """Per row, the tokens of `seq.tokens` that the named cache does not hold yet."""
        cache = self.caches[name]
        return [seq.tokens[cache.lengths[r] :] for r, seq in enumerate(self.seqs)]

    def feed(
        self,
        name: str,
        model: CausalLM,
        extra: Seq[Seq[int]] | None = None,
        *,
        parents: Seq[Seq[int]] | None = None,
        logits: Literal["all", "last", "none"] = "all",
    ) -> ForwardOutput:
        """One forward of `model` that brings its cache up to date (the uncached tokens of every row) and
        appends `extra[r]` (draft tokens) after them. All fed tokens are pending until committed; row r fed
        `u = out.n_new[r] - len(extra[r])` uncached tokens first.

        parents: for a token tree, parents[r][i] is the index in extra[r] of node i's parent, or -1 when node i
            continues the row's last uncached token (parents come before children). Each node then sees the
            context and its own ancestors only, at position (context length + depth). Without it, extra[r] is
            a chain. Keep an accepted path with `cache.commit([list(range(u)) + [u + i for i in path]])`.
        """
        cache = self.cache(name, model)
        if cache.has_pending:
            raise RuntimeError(f"feed({name!r}): the cache has pending tokens; commit them first")
        extra = extra if extra is not None else [()] * len(self.seqs)
        uncached = self.uncached(name)
        tokens = [u + list(e) for u, e in zip(uncached, extra)]
        if parents is None:
            return model.forward(cache, tokens, logits=logits)
        positions, attend = [], []
        for r, (u, nodes) in enumerate(zip(uncached, parents)):
            pos, mask = tree_layout(cache.lengths[r], len(u), nodes)
            positions.append(pos)
            attend.append(mask)
        return model.forward(cache, tokens, positions=positions, attend=attend, logits=logits)

    # ------------------------------------------------------------------ membership (executor)
    def select(self, rows: Seq[int]) -> None:
        self.seqs = [self.seqs[r] for r in rows]
        for cache in self.caches.values():
            cache.select_rows(rows)

    def extend(self, other: "Batch") -> None:
        if not self.seqs:
            self.seqs, self.caches = list(other.seqs), dict(other.caches)
            return
        if set(self.caches) != set(other.caches):
            raise RuntimeError(f"cannot merge batches with caches {sorted(self.caches)} and {sorted(other.caches)}")
        for name, cache in self.caches.items():
            cache.extend(other.caches[name])
        self.seqs = self.seqs + list(other.seqs)


def tree_layout(context_len: int, n_uncached: int, parents: Seq[int]) -> tuple[list[int], torch.Tensor]:
    """Positions and visibility of `n_uncached` chain tokens followed by a token tree given by `parents`
    (index of each node's parent among the nodes, -1 for the root's children)."""
    n = n_uncached + len(parents)
    positions = list(range(context_len, context_len + n_uncached))
    mask = torch.zeros(n, n, dtype=torch.bool)
    mask[:n_uncached, :n_uncached] = torch.ones(n_uncached, n_uncached, dtype=torch.bool).tril()
    depth: list[int] = []
    for i, parent in enumerate(parents):
        if not -1 <= parent < i:
            raise ValueError(f"tree node {i}: parent {parent} must be -1 or an earlier node")
        row = n_uncached + i
        mask[row, :n_uncached] = True
        if parent >= 0:
            mask[row] |= mask[n_uncached + parent]
        mask[row, row] = True
        depth.append(1 if parent < 0 else depth[parent] + 1)
        positions.append(context_len + n_uncached - 1 + depth[i])
    return positions, mask
