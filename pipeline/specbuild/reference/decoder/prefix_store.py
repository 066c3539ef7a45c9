"""KV-cache reuse across requests (TensorRT-LLM's `enable_kv_cache_reuse`, by whole prefixes rather than blocks).

When a sequence leaves the batch its committed KV is kept here (least recently used first out, within a token
budget). A new request whose prompt shares a prefix with a kept sequence starts its target cache from that
prefix and prefills only the rest. This is what makes the Triton BLS loops cheap: each draft-target or prompt
lookup round is a new request whose prompt extends the previous round's.

A kept KV row is valid for any prompt that starts with the same tokens: the entry at position i depends only
on tokens[: i + 1]. So a kept sequence that is a prefix of a newly kept one is dropped: the new entry answers
every prompt the old one did, at least as far. A conversation of BLS rounds therefore holds one entry, not one
per round.

Beside the KV an entry may keep a method's own per-position state, `extras` ({name: [length, ...]}, position i at
row i, depending on tokens[: i + 1] as the KV does): the target's features an EAGLE head reads. A method that
needs some asks for them by name (`needs`), and only entries that have them answer it.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Sequence as Seq

import torch

# One row's committed KV, every layer: [layers, 2 (keys, values), kv_heads, length, head_dim]
# (KVCache.row_kv / KVCache.from_rows)
KV = torch.Tensor
Extras = dict[str, torch.Tensor]


class PrefixStore:
    def __init__(self, max_tokens: int = 32768):
        self.max_tokens = max_tokens
        self._entries: OrderedDict[int, tuple[torch.Tensor, KV, Extras]] = OrderedDict()
        self._next = 0
        self._tokens = 0
        self.hits = 0
        self.reused_tokens = 0

    def __len__(self) -> int:
        return len(self._entries)

    def put(self, tokens: Seq[int], kv: KV, extras: Extras | None = None) -> None:
        if not tokens or len(tokens) > self.max_tokens:
            return
        new = torch.tensor(list(tokens), dtype=torch.long)
        extras = dict(extras or {})
        for key in [
            key
            for key, (stored, _, kept) in self._entries.items()
            if len(stored) <= len(new) and torch.equal(stored, new[: len(stored)]) and set(kept) <= set(extras)
        ]:
            self._tokens -= len(self._entries.pop(key)[0])
        self._entries[self._next] = (new, kv, extras)
        self._next += 1
        self._tokens += len(new)
        while self._tokens > self.max_tokens:
            _, (old, _, _) = self._entries.popitem(last=False)
            self._tokens -= len(old)

    def longest_prefix(self, tokens: Seq[int], needs: Seq[str] = ()) -> tuple[int, KV | None, Extras]:
        """The longest stored prefix of `tokens` (at most len(tokens) - 1: the last prompt token must be fed to
        get logits) among the entries that keep the extras named in `needs`, its KV and those extras (all to be
        cut at that length)."""
        query = torch.tensor(list(tokens), dtype=torch.long)
        best, best_key = 0, None
        for key, (stored, _, extras) in self._entries.items():
            n = min(len(stored), len(query) - 1)
            if n <= best or any(name not in extras for name in needs):
                continue
            mismatch = (stored[:n] != query[:n]).nonzero()
            common = int(mismatch[0]) if len(mismatch) else n
            if common > best:
                best, best_key = common, key
        if best_key is None:
            return 0, None, {}
        self._entries.move_to_end(best_key)
        self.hits += 1
        self.reused_tokens += best
        _, kv, extras = self._entries[best_key]
        return best, kv, {name: extras[name] for name in needs}
