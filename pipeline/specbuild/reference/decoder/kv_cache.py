"""Batched KV cache with per-row lengths, preallocated and addressed by position.

One buffer holds every layer's keys and values: `[layers, 2, rows, kv_heads, capacity, head_dim]`. Row r holds
`lengths[r]` *committed* tokens, the token at position p in slot p. A forward writes its tokens after the row's
committed and earlier pending tokens, in feed order; they stay *pending* until the caller commits them.
`commit(keep)` keeps, per row, any subset of its pending tokens (a draft prefix, or an accepted path through a
token tree): kept token i goes to slot `lengths[r] + i`, so a chain commit moves nothing and a tree commit moves
only the accepted entries that do not already sit at their position. Slots past a row's length are stale and
never visible (the attention mask hides them), so rows can accept different numbers of tokens.

Keys and values may differ in width (transformers' DeepSeek-V3 multi-head latent attention caches its compressed
latent, kv_lora_rank wide, as the "keys" and the shared RoPE key, qk_rope_head_dim wide, as the "values": one head
each): the buffer is as wide as the wider one, and each is read back at its own width.

RoPE is applied before keys are cached, so a kept token must sit at the slot equal to its position: commits are
checked for that (`positions == lengths[r] + i`).

This module plans the masks and positions (`plan_forward`); a network then writes each layer's new keys and
values with `write(layer, k, v)` (the lean path, `specbuild.reference.decoder.lean`) or through `store`, an object with
the `update(k, v, layer_idx)` method transformers' attention calls (the transformers path, or any other network
built from transformers layers, such as an EAGLE head): both return the keys and values attention reads.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import torch

CHUNK = 256  # capacity grows in multiples of this many slots (doubling), so growth copies are rare


@dataclass
class ForwardPlan:
    """What one forward needs: positions, where each row's tokens are written, and what each token sees."""

    n_new: list[int]  # real (non-padding) tokens fed per row; row r's tokens sit at [0, n_new[r])
    width: int  # S: padded number of tokens per row
    position_ids: torch.Tensor  # [B, S] long
    starts: list[int]  # row r's token s is written to slot starts[r] + s (padding too: stale slots)
    keys_length: int  # T: attention reads slots [0, T) of every row
    mask: torch.Tensor | None  # [B, 1, S, T] bool, True = visible; None = every query sees all T slots
    max_position: int  # the largest entry of position_ids
    same_start: bool = False  # every row starts at starts[0] (one slice write per layer)
    chain_start: int | None = None  # every row's positions are chain_start, chain_start + 1, ... (width of them)
    _index: tuple[torch.Tensor, torch.Tensor] | None = field(default=None, repr=False)

    def additive_mask(self, dtype: torch.dtype) -> torch.Tensor:
        """The 4D **additive float** mask transformers expects: 0 where visible, dtype-min elsewhere.

        (A boolean 4D mask is silently misread by eager attention: it is added to the scores as 0/1.)
        """
        mask = torch.zeros(len(self.n_new), 1, self.width, self.keys_length, dtype=dtype)
        if self.mask is not None:
            mask.masked_fill_(~self.mask, torch.finfo(dtype).min)
        return mask

    def write_index(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(rows [B, 1], slots [B, S]): where the fed tokens go when rows start at different slots."""
        if self._index is None:
            starts = torch.tensor(self.starts, dtype=torch.long)
            self._index = (torch.arange(len(self.starts))[:, None], starts[:, None] + torch.arange(self.width))
        return self._index


class KVCache:
    """The KV cache of one model for one batch of sequences (row-aligned with `Batch.seqs`)."""

    def __init__(self, hf_config, n_rows: int):
        self.n_layers = int(hf_config.num_hidden_layers)
        self.lengths: list[int] = [0] * n_rows
        # Positions of the pending tokens of the current round, per row, in feed order (slot lengths[r] + i).
        self.pending_positions: list[list[int]] = [[] for _ in range(n_rows)]
        self.buffer: torch.Tensor | None = None  # [layers, 2, rows, kv_heads, capacity, head_dim], on first write
        self._rows: torch.Tensor | None = None  # the block `buffer` views, with spare rows (batch membership)
        self._plan: ForwardPlan | None = None
        self._written = 0
        self.widths: tuple[int, int] | None = None  # (key, value) head widths, known from the first write

    @property
    def store(self) -> "_TransformersStore":
        """The transformers-facing view of this cache, made on each use: a view kept here would make every cache a
        reference cycle, whose buffers only the cyclic garbage collector frees (long after the batch let go)."""
        return _TransformersStore(self)

    # ------------------------------------------------------------------ shape
    def __len__(self) -> int:
        return len(self.lengths)

    @property
    def capacity(self) -> int:
        return 0 if self.buffer is None else self.buffer.shape[-2]

    @property
    def physical_length(self) -> int:
        """Slots spanned by the committed and pending tokens of the longest row."""
        return max((n + len(p) for n, p in zip(self.lengths, self.pending_positions)), default=0)

    def n_pending(self, row: int) -> int:
        return len(self.pending_positions[row])

    @property
    def has_pending(self) -> bool:
        return any(self.pending_positions)

    def next_position(self, row: int) -> int:
        """Position of the next token fed in a chain: after the committed and pending tokens of the row."""
        return self.lengths[row] + len(self.pending_positions[row])

    def layer(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(keys, values) of one layer over the slots in use: [rows, kv_heads, physical_length, head_dim] views."""
        n = self.physical_length
        if self._same_widths:
            return self.buffer[index, 0, :, :, :n], self.buffer[index, 1, :, :, :n]
        dk, dv = self.widths
        return self.buffer[index, 0, :, :, :n, :dk], self.buffer[index, 1, :, :, :n, :dv]

    @property
    def _same_widths(self) -> bool:
        return self.widths is None or self.widths[0] == self.widths[1] == self.buffer.shape[-1]

    # ------------------------------------------------------------------ forward planning
    def plan_forward(
        self,
        n_new: Sequence[int],
        positions: Sequence[Sequence[int] | None] | None = None,
        attend: Sequence[torch.Tensor | None] | None = None,
    ) -> ForwardPlan:
        """Plan a forward that feeds `n_new[r]` tokens to row r, and register them as pending.

        positions: per row, the absolute position of each fed token (default: a chain continuing after the
            row's committed and pending tokens).
        attend: per row, None (chain: every earlier pending token and causal among the new ones) or a bool
            tensor [n_new[r], n_pending[r] + n_new[r]] saying which earlier pending tokens and which new tokens
            each new token sees (a token-tree mask). Committed tokens are always visible.
        The network then writes every layer once (`write` or `store.update`) and attends with `plan.mask`
        (or `plan.additive_mask(dtype)`) over the keys `[0, plan.keys_length)`, at `plan.position_ids`.
        """
        n_rows = len(self.lengths)
        if len(n_new) != n_rows:
            raise ValueError(f"n_new has {len(n_new)} rows, the cache has {n_rows}")
        if any(n < 0 for n in n_new):
            raise ValueError(f"n_new={list(n_new)}")
        width = max(max(n_new, default=0), 1)
        starts = [self.next_position(r) for r in range(n_rows)]
        keys_length = max(starts, default=0) + width
        same_start = all(s == starts[0] for s in starts)
        slots = [list(range(s, s + width)) for s in starts]  # the slot of each row's s-th fed token (padding too)
        custom = positions is not None and any(p is not None for p in positions)
        rows_pos = [list(row) for row in slots] if custom else slots
        max_position = keys_length - 1
        fed: list = []
        for r in range(n_rows):
            k = n_new[r]
            if custom and positions[r] is not None:
                row_pos = list(positions[r])
                if len(row_pos) != k:
                    raise ValueError(f"row {r}: {len(row_pos)} positions for {k} tokens")
                rows_pos[r][:k] = row_pos
                max_position = max([max_position, *row_pos])
            else:
                row_pos = slots[r][:k]
            fed.append(row_pos)
        # built from Python lists in one call each: on the decode path every small tensor operation costs (bench/
        # README.md, "Where a forward's time goes on the Xeon")
        pos = torch.tensor(rows_pos, dtype=torch.long).view(n_rows, width)  # [B, S] (B may be 0)

        # Chain visibility for every row: a query at slot q sees slots [0, q] (committed, earlier pending, causal
        # new). A padding query sees the same (never a fully masked row, which would give NaN); no real query
        # sees a padding key, which sits after it.
        mask = None
        if width > 1 or attend is not None or not same_start:  # else every slot is visible
            slot_of_query = torch.tensor(slots, dtype=torch.long).view(n_rows, width) if custom else pos
            mask = (torch.arange(keys_length) <= slot_of_query[:, :, None])[:, None]  # [B, 1, S, T]
        if attend is not None:
            for r in range(n_rows):
                row_attend, k = attend[r], n_new[r]
                if row_attend is None:
                    continue
                p = len(self.pending_positions[r])
                if tuple(row_attend.shape) != (k, p + k):
                    raise ValueError(f"row {r}: attend has shape {tuple(row_attend.shape)}, expected {(k, p + k)}")
                if k:
                    mask[r, 0, :k, self.lengths[r] : starts[r] + k] = row_attend.to(torch.bool)
        for r, row_pos in enumerate(fed):  # registered once every row checked out
            self.pending_positions[r].extend(row_pos)
        chain_start = starts[0] if same_start and not custom and n_rows else None
        plan = ForwardPlan(list(n_new), width, pos, starts, keys_length, mask, max_position, same_start, chain_start)
        self._reserve(keys_length)
        self._plan, self._written = plan, 0
        return plan

    def write(self, layer: int, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store one layer's keys and values of the planned forward ([B, kv_heads, S, head_dim]); returns that
        layer's keys and values over the slots attention reads ([B, kv_heads, T, head_dim] views)."""
        plan = self._plan
        if plan is None:
            raise RuntimeError("KVCache.write: no forward planned (call plan_forward first)")
        if self.buffer is None:
            self._allocate(keys, plan.keys_length, width=max(keys.shape[-1], values.shape[-1]))
        if self.widths is None:
            self.widths = (keys.shape[-1], values.shape[-1])
        if not self._same_widths:
            return self._write_narrow(layer, keys, values)
        kv = self.buffer[layer]
        if plan.same_start:
            first = plan.starts[0]
            kv[0, :, :, first : first + plan.width] = keys
            kv[1, :, :, first : first + plan.width] = values
        else:
            rows, slots = plan.write_index()
            keys_of, values_of = kv[0], kv[1]
            keys_of[rows, :, slots] = keys.transpose(1, 2)  # [B, S, heads, dim] at (row, slot)
            values_of[rows, :, slots] = values.transpose(1, 2)
        self._written += 1
        return kv[0, :, :, : plan.keys_length], kv[1, :, :, : plan.keys_length]

    def _write_narrow(self, layer: int, keys: torch.Tensor, values: torch.Tensor):
        """`write` for keys and values of different widths, each in the leading columns of its half."""
        plan = self._plan
        dk, dv = self.widths
        if (keys.shape[-1], values.shape[-1]) != (dk, dv):
            raise ValueError(f"key/value widths {keys.shape[-1]}/{values.shape[-1]}, the cache holds {dk}/{dv}")
        keys_of, values_of = self.buffer[layer, 0, ..., :dk], self.buffer[layer, 1, ..., :dv]
        if plan.same_start:
            first = plan.starts[0]
            keys_of[:, :, first : first + plan.width] = keys
            values_of[:, :, first : first + plan.width] = values
        else:
            rows, slots = plan.write_index()
            keys_of[rows, :, slots] = keys.transpose(1, 2)
            values_of[rows, :, slots] = values.transpose(1, 2)
        self._written += 1
        return keys_of[:, :, : plan.keys_length], values_of[:, :, : plan.keys_length]

    def check_appended(self, plan: ForwardPlan) -> None:
        """After a network ran a planned forward: every layer must have been written once."""
        if plan is not self._plan or self._written != self.n_layers:
            raise RuntimeError(
                f"the network wrote {self._written} cache layers for this forward, expected {self.n_layers}: "
                "does it call the cache once per layer (KVCache.write or store.update)?"
            )
        self._plan = None

    def _reserve(self, slots: int) -> None:
        if self.buffer is not None and slots > self.capacity:
            grown = self.buffer.new_zeros(
                *self.buffer.shape[:4], _rounded(max(slots, 2 * self.capacity)), self.buffer.shape[-1]
            )
            grown[..., : self.capacity, :] = self.buffer
            self.buffer = self._rows = grown

    def _allocate(self, like: torch.Tensor, slots: int, rows: int | None = None, width: int | None = None) -> None:
        _, heads, _, dim = like.shape
        rows = len(self.lengths) if rows is None else rows
        width = dim if width is None else width
        self.buffer = self._rows = like.new_zeros(self.n_layers, 2, rows, heads, _rounded(slots), width)

    # ------------------------------------------------------------------ commit / rollback
    @torch.inference_mode()
    def commit(self, keep: Sequence[Sequence[int]]) -> None:
        """Keep, per row, the pending tokens with these indices (into the row's pending list, in feed order);
        they become committed in that order. Every other pending token is dropped."""
        if len(keep) != len(self.lengths):
            raise ValueError(f"keep has {len(keep)} rows, the cache has {len(self.lengths)}")
        src_rows: list[int] = []
        src_slots: list[int] = []
        dst_slots: list[int] = []
        new_lengths = list(self.lengths)
        for r, indices in enumerate(keep):
            base, positions = self.lengths[r], self.pending_positions[r]
            for i, idx in enumerate(indices):
                if not 0 <= idx < len(positions):
                    raise ValueError(f"row {r}: pending index {idx} out of range ({len(positions)} pending)")
                if positions[idx] != base + i:
                    raise ValueError(
                        f"row {r}: kept token {idx} has position {positions[idx]}, but it would be committed at "
                        f"{base + i}; a kept path must continue the committed sequence one position at a time"
                    )
                if idx != i:
                    src_rows.append(r)
                    src_slots.append(base + idx)
                    dst_slots.append(base + i)
            new_lengths[r] = base + len(indices)
        if src_rows:
            rows = torch.tensor(src_rows, dtype=torch.long)
            moved = self.buffer[
                :, :, rows, :, torch.tensor(src_slots)
            ]  # gather first: sources and destinations overlap
            self.buffer[:, :, rows, :, torch.tensor(dst_slots)] = moved
        self.lengths = new_lengths
        self._clear_pending()

    def commit_prefix(self, n_keep: Sequence[int]) -> None:
        """Keep the first `n_keep[r]` pending tokens of each row (a chain: accepted drafts). Moves nothing."""
        if len(n_keep) != len(self.lengths):
            raise ValueError(f"n_keep has {len(n_keep)} rows, the cache has {len(self.lengths)}")
        for r, n in enumerate(n_keep):
            base, positions = self.lengths[r], self.pending_positions[r]
            if not 0 <= n <= len(positions) or positions[:n] != list(range(base, base + n)):
                return self.commit([range(n) for n in n_keep])  # raises the precise error
        self.lengths = [n + k for n, k in zip(self.lengths, n_keep)]
        self._clear_pending()

    def commit_all(self) -> None:
        self.commit_prefix([len(p) for p in self.pending_positions])

    def rollback(self) -> None:
        """Drop every pending token."""
        self.lengths = list(self.lengths)
        self._clear_pending()

    def _clear_pending(self) -> None:
        self.pending_positions = [[] for _ in self.lengths]
        self._plan = None

    # ------------------------------------------------------------------ whole rows (KV reuse)
    def row_kv(self, row: int) -> torch.Tensor:
        """The committed KV of one row, every layer: [layers, 2, kv_heads, length, head_dim] (a copy)."""
        self._require_no_pending("row_kv")
        if self.buffer is None:
            return torch.empty(0)
        return self.buffer[:, :, row, :, : self.lengths[row]].clone()

    @classmethod
    @torch.inference_mode()
    def from_rows(cls, hf_config, rows: Sequence[tuple[int, torch.Tensor | None]]) -> "KVCache":
        """A cache whose row r starts with the first n_r tokens of a kept row KV (rows: (n_r, row_kv or None))."""
        cache = cls(hf_config, len(rows))
        kept = [(n, kv) for n, kv in rows if kv is not None and n > 0]
        if not kept:
            return cache
        template = kept[0][1][0, 0]  # layer 0 keys [heads, n, dim]
        cache._allocate(template[None], max(n for n, _ in kept))
        for r, (n, kv) in enumerate(rows):
            if kv is not None and n > 0:
                cache.buffer[:, :, r, :, :n] = kv[..., :n, :]
                cache.lengths[r] = n
        return cache

    # ------------------------------------------------------------------ batch membership
    # Rows come and go as requests finish and join (every round of a Triton BLS loop is a new request). The buffer
    # is a view of the first len(self) rows of `_rows`, a block with spare rows: a leaving row is overwritten by the
    # rows after it, a joining row is copied into the spare rows, and neither copies the whole batch's cache.
    # Slots past a row's length may hold a departed row's entries: stale, finite and never visible.
    @torch.inference_mode()
    def select_rows(self, rows: Sequence[int]) -> None:
        """Keep only these rows, in this order (requests that left the batch are dropped)."""
        self._require_no_pending("select_rows")
        rows = list(rows)
        if self.buffer is not None:
            if all(a < b for a, b in zip(rows, rows[1:])):  # the survivors in batch order: close the gaps in place
                for i, r in enumerate(rows):
                    if r != i:  # r > i, and no later row reads row i
                        self._rows[:, :, i, :, : self.lengths[r]] = self._rows[:, :, r, :, : self.lengths[r]]
                self.buffer = self._rows[:, :, : len(rows)]
            else:
                self.buffer = self._rows = self.buffer.index_select(2, torch.tensor(rows, dtype=torch.long))
        self.lengths = [self.lengths[r] for r in rows]
        self._clear_pending()

    @torch.inference_mode()
    def extend(self, other: "KVCache") -> None:
        """Append the rows of `other` (requests joining the batch) after this cache's rows."""
        self._require_no_pending("extend")
        other._require_no_pending("extend")
        if len(other) == 0:
            return
        n = len(self) + len(other)
        self.widths = self.widths or other.widths
        if other.buffer is not None:
            used = max(other.lengths)
            if self.buffer is None:
                self._allocate(other.buffer[0, 0], used, rows=n)
            self._make_room(n, used)
            self._rows[:, :, len(self) : n, :, :used] = other.buffer[:, :, :, :, :used]
        elif self.buffer is not None:
            self._make_room(n, 0)
        if self.buffer is not None:
            self.buffer = self._rows[:, :, :n]
        self.lengths = self.lengths + list(other.lengths)
        self._clear_pending()

    def _make_room(self, rows: int, slots: int) -> None:
        """`_rows` holds at least `rows` rows of at least `slots` slots (this cache's rows copied once if it grows;
        twice the rows it has, so that joins in a row mostly find spare rows)."""
        if rows <= self._rows.shape[2] and slots <= self._rows.shape[-2]:
            return
        shape = list(self._rows.shape)
        shape[2] = max(rows, 2 * len(self))
        shape[-2] = max(shape[-2], _rounded(slots))
        grown = self._rows.new_zeros(shape)
        grown[:, :, : len(self), :, : self._rows.shape[-2]] = self._rows[:, :, : len(self)]
        self._rows = grown

    def _require_no_pending(self, what: str) -> None:
        if self.has_pending:
            raise RuntimeError(f"{what}: the cache has uncommitted tokens; commit or rollback first")


def _rounded(slots: int) -> int:
    return max(CHUNK, -(-slots // CHUNK) * CHUNK)


class _TransformersStore:
    """The cache as transformers' attention modules use it: `update(k, v, layer_idx)` stores the planned
    forward's keys and values and returns what attention reads (with `plan.additive_mask` as the 4D mask).
    `layers[i].keys` / `.values` show a layer's slots in use, as `DynamicCache.layers` does."""

    def __init__(self, cache: KVCache):
        self._cache = cache

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args, **kwargs):
        return self._cache.write(layer_idx, key_states, value_states)

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self._cache.physical_length

    @property
    def layers(self) -> list["_LayerView"]:
        if self._cache.buffer is None:
            return []
        return [_LayerView(*self._cache.layer(i)) for i in range(self._cache.n_layers)]


@dataclass
class _LayerView:
    keys: torch.Tensor
    values: torch.Tensor
