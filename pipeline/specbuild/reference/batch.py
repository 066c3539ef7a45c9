"""The sequences decoded together, and the KV caches of every model that reads them (row-aligned).

A method names its caches ("target", "draft", "eagle", ...); the executor moves their rows together when
requests leave (`select`) or join (`extend`). Invariant between steps: each cache holds a prefix of each row's
`seq.tokens` with nothing pending; usually all tokens but the last (the next forward's first input).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Sequence as Seq

from specbuild.reference.kv_cache import KVCache
from specbuild.reference.model import CausalLM, ForwardOutput
from specbuild.reference.sequence import Sequence


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
        logits: Literal["all", "last", "none"] = "all",
    ) -> ForwardOutput:
        """One forward of `model` that brings its cache up to date (the uncached tokens of every row) and
        appends `extra[r]` (e.g. draft tokens) after them. All fed tokens are pending until committed; row r fed
        `out.n_new[r] - len(extra[r])` uncached tokens."""
        cache = self.cache(name, model)
        if cache.has_pending:
            raise RuntimeError(f"feed({name!r}): the cache has pending tokens; commit them first")
        extra = extra if extra is not None else [()] * len(self.seqs)
        tokens = [u + list(e) for u, e in zip(self.uncached(name), extra)]
        return model.forward(cache, tokens, logits=logits)

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
