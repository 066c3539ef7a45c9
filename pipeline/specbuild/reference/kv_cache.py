"""Batched KV cache with per-row lengths, on top of transformers' `DynamicCache`.

Row r of the batch holds `lengths[r]` *committed* tokens in physical slots `[0, lengths[r])`. A forward appends
S slots to every row (transformers concatenates at the end of the sequence axis); those slots are *pending*
until the caller commits them. `commit(keep)` keeps, per row, any subset of its pending tokens (a draft
prefix, or an accepted path through a token tree) and compacts them to `[lengths[r], lengths[r] + len(keep[r]))`;
everything else is dropped. Slots past a row's length are stale and never visible (the attention mask hides
them), so rows can accept different numbers of tokens.

RoPE is applied before keys are cached, so a kept token must sit at the slot equal to its position:
commits are checked for that (`positions == lengths[r] + i`).

This module plans the masks and positions; `model.CausalLM.forward` runs the network. Another network that
shares the layout (for example an EAGLE draft head) can use `plan_forward` and `store` the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch


@dataclass
class ForwardPlan:
    """What one forward needs: positions, visibility, and how many real tokens each row feeds."""

    n_new: list[int]  # real (non-padding) tokens fed per row; row r's tokens sit at [0, n_new[r])
    width: int  # S: padded number of tokens per row
    position_ids: torch.Tensor  # [B, S] long
    visible: torch.Tensor  # [B, S, T + S] bool, T = physical cache length before the forward

    def additive_mask(self, dtype: torch.dtype) -> torch.Tensor:
        """The 4D **additive float** mask transformers expects: 0 where visible, dtype-min elsewhere.

        (A boolean 4D mask is silently misread by eager attention: it is added to the scores as 0/1.)
        """
        mask = torch.zeros(self.visible.shape, dtype=dtype)
        mask.masked_fill_(~self.visible, torch.finfo(dtype).min)
        return mask[:, None]  # [B, 1, S, T + S]


class KVCache:
    """The KV cache of one model for one batch of sequences (row-aligned with `Batch.seqs`)."""

    def __init__(self, hf_config, n_rows: int):
        from transformers import DynamicCache

        self._hf_config = hf_config
        self.store = DynamicCache(config=hf_config)
        self.lengths: list[int] = [0] * n_rows
        # Pending tokens of the current round, per row, in the order they were fed: physical slot and position.
        self.pending_slots: list[list[int]] = [[] for _ in range(n_rows)]
        self.pending_positions: list[list[int]] = [[] for _ in range(n_rows)]

    # ------------------------------------------------------------------ shape
    def __len__(self) -> int:
        return len(self.lengths)

    @property
    def physical_length(self) -> int:
        layer = self.store.layers[0] if self.store.layers else None
        if layer is None or not layer.is_initialized or layer.keys is None or layer.keys.numel() == 0:
            return 0
        return layer.keys.shape[-2]

    def n_pending(self, row: int) -> int:
        return len(self.pending_slots[row])

    @property
    def has_pending(self) -> bool:
        return any(self.pending_slots)

    def next_position(self, row: int) -> int:
        """Position of the next token fed in a chain: after the committed and pending tokens of the row."""
        return self.lengths[row] + len(self.pending_slots[row])

    # ------------------------------------------------------------------ forward planning
    def plan_forward(
        self,
        n_new: Sequence[int],
        positions: Sequence[Sequence[int]] | None = None,
        attend: Sequence[torch.Tensor | None] | None = None,
    ) -> ForwardPlan:
        """Plan a forward that feeds `n_new[r]` tokens to row r, and register them as pending.

        positions: per row, the absolute position of each fed token (default: a chain continuing after the
            row's committed and pending tokens).
        attend: per row, None (chain: every earlier pending token and causal among the new ones) or a bool
            tensor [n_new[r], n_pending[r] + n_new[r]] saying which earlier pending tokens and which new tokens
            each new token sees (a token-tree mask). Committed tokens are always visible.
        Call the network with `store` as its cache, `plan.additive_mask(dtype)` and `plan.position_ids` next:
        the network appends S = plan.width slots to every row.
        """
        n_rows = len(self.lengths)
        if len(n_new) != n_rows:
            raise ValueError(f"n_new has {len(n_new)} rows, the cache has {n_rows}")
        if any(n < 0 for n in n_new):
            raise ValueError(f"n_new={list(n_new)}")
        width = max(max(n_new, default=0), 1)
        phys = self.physical_length
        n = torch.tensor(list(n_new), dtype=torch.long)
        steps = torch.arange(width)

        # Defaults for every row (vectorised): a chain after the committed and pending tokens.
        start = torch.tensor([self.next_position(r) for r in range(n_rows)], dtype=torch.long)
        pos = start[:, None] + steps[None, :]
        visible = torch.zeros(n_rows, width, phys + width, dtype=torch.bool)
        visible[:, :, :phys] = (torch.arange(phys)[None, :] < torch.tensor(self.lengths, dtype=torch.long)[:, None])[:, None, :]
        real_query = (steps[None, :] < n[:, None])[:, :, None]  # [B, S, 1]
        causal = torch.ones(width, width, dtype=torch.bool).tril()
        # Real queries: causal among the new tokens. Padding queries see only themselves (never a fully masked
        # row, which would give NaN in softmax); nothing sees a padding key.
        visible[:, :, phys:] = torch.where(real_query, causal[None], torch.eye(width, dtype=torch.bool)[None])

        for r in range(n_rows):
            k = n_new[r]
            slots = self.pending_slots[r]
            if positions is not None and positions[r] is not None:
                row_pos = list(positions[r])
                if len(row_pos) != k:
                    raise ValueError(f"row {r}: {len(row_pos)} positions for {k} tokens")
                pos[r, :k] = torch.tensor(row_pos, dtype=torch.long)
            row_attend = attend[r] if attend is not None else None
            if row_attend is not None:
                p = len(slots)
                if tuple(row_attend.shape) != (k, p + k):
                    raise ValueError(f"row {r}: attend has shape {tuple(row_attend.shape)}, expected {(k, p + k)}")
                row_attend = row_attend.to(torch.bool)
                if p:
                    visible[r, :k, slots] = row_attend[:, :p]
                visible[r, :k, phys : phys + k] = row_attend[:, p:]
            elif slots:
                visible[r, :k, slots] = True
            if k:
                self.pending_slots[r] = slots + list(range(phys, phys + k))
                self.pending_positions[r] = self.pending_positions[r] + pos[r, :k].tolist()
        return ForwardPlan(list(n_new), width, pos, visible)

    def check_appended(self, plan: ForwardPlan, physical_before: int) -> None:
        if self.physical_length != physical_before + plan.width:
            raise RuntimeError(
                f"the network appended {self.physical_length - physical_before} cache slots, expected {plan.width}: "
                "is this model using a cache layout other than transformers' DynamicLayer?"
            )

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
            slots, positions = self.pending_slots[r], self.pending_positions[r]
            for i, idx in enumerate(indices):
                if not 0 <= idx < len(slots):
                    raise ValueError(f"row {r}: pending index {idx} out of range ({len(slots)} pending)")
                if positions[idx] != self.lengths[r] + i:
                    raise ValueError(
                        f"row {r}: kept token {idx} has position {positions[idx]}, but it would be committed at "
                        f"{self.lengths[r] + i}; a kept path must continue the committed sequence one position at a time"
                    )
                dst = self.lengths[r] + i
                if slots[idx] != dst:
                    src_rows.append(r)
                    src_slots.append(slots[idx])
                    dst_slots.append(dst)
            new_lengths[r] = self.lengths[r] + len(indices)

        if src_rows:
            rows = torch.tensor(src_rows, dtype=torch.long)
            src = torch.tensor(src_slots, dtype=torch.long)
            dst = torch.tensor(dst_slots, dtype=torch.long)
            for layer in self.store.layers:
                moved_k = layer.keys[rows, :, src, :]  # gather first: sources and destinations may overlap
                moved_v = layer.values[rows, :, src, :]
                layer.keys[rows, :, dst, :] = moved_k
                layer.values[rows, :, dst, :] = moved_v
        self.lengths = new_lengths
        self._clear_pending_and_trim()

    def commit_prefix(self, n_keep: Sequence[int]) -> None:
        """Keep the first `n_keep[r]` pending tokens of each row (a chain: accepted drafts)."""
        self.commit([range(n) for n in n_keep])

    def commit_all(self) -> None:
        self.commit_prefix([len(s) for s in self.pending_slots])

    def rollback(self) -> None:
        """Drop every pending token."""
        self.commit([[] for _ in self.lengths])

    @torch.inference_mode()
    def _clear_pending_and_trim(self) -> None:
        self.pending_slots = [[] for _ in self.lengths]
        self.pending_positions = [[] for _ in self.lengths]
        target = max(self.lengths, default=0)
        if target < self.physical_length:
            for layer in self.store.layers:
                layer.keys = layer.keys[..., :target, :]
                layer.values = layer.values[..., :target, :]

    # ------------------------------------------------------------------ whole rows (KV reuse)
    def row_kv(self, row: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """The committed KV of one row: per layer (keys, values) of shape [heads, length, head_dim] (copies)."""
        self._require_no_pending("row_kv")
        n = self.lengths[row]
        return [(layer.keys[row, :, :n].clone(), layer.values[row, :, :n].clone()) for layer in self.store.layers]

    @classmethod
    @torch.inference_mode()
    def from_rows(cls, hf_config, rows: Sequence[tuple[int, list[tuple[torch.Tensor, torch.Tensor]] | None]]) -> "KVCache":
        """A cache whose row r starts with the first n_r tokens of a kept row KV (rows: (n_r, kv or None))."""
        cache = cls(hf_config, len(rows))
        width = max((n for n, kv in rows if kv is not None), default=0)
        if width == 0:
            return cache
        template = next(kv for n, kv in rows if kv is not None and n > 0)
        for i, layer in enumerate(cache.store.layers):
            heads, _, dim = template[i][0].shape
            keys = torch.zeros(len(rows), heads, width, dim, dtype=template[i][0].dtype)
            values = torch.zeros_like(keys)
            for r, (n, kv) in enumerate(rows):
                if kv is not None and n > 0:
                    keys[r, :, :n] = kv[i][0][:, :n]
                    values[r, :, :n] = kv[i][1][:, :n]
            layer.update(keys, values)
        cache.lengths = [n if kv is not None else 0 for n, kv in rows]
        return cache

    # ------------------------------------------------------------------ batch membership
    @torch.inference_mode()
    def select_rows(self, rows: Sequence[int]) -> None:
        """Keep only these rows, in this order (requests that left the batch are dropped)."""
        self._require_no_pending("select_rows")
        index = torch.tensor(list(rows), dtype=torch.long)
        if self.physical_length > 0:
            for layer in self.store.layers:
                layer.keys = layer.keys.index_select(0, index)
                layer.values = layer.values.index_select(0, index)
        self.lengths = [self.lengths[r] for r in rows]
        self._clear_pending_and_trim()

    @torch.inference_mode()
    def extend(self, other: "KVCache") -> None:
        """Append the rows of `other` (requests joining the batch) after this cache's rows."""
        self._require_no_pending("extend")
        other._require_no_pending("extend")
        if len(other) == 0:
            return
        if len(self) == 0:
            self.store, self.lengths = other.store, list(other.lengths)
            self._clear_pending_and_trim()
            return
        if self.physical_length == 0 or other.physical_length == 0:
            raise RuntimeError("extend: both caches must have been prefilled")
        length = max(self.physical_length, other.physical_length)
        for mine, theirs in zip(self.store.layers, other.store.layers):
            mine.keys = torch.cat([_pad_seq(mine.keys, length), _pad_seq(theirs.keys, length)], dim=0)
            mine.values = torch.cat([_pad_seq(mine.values, length), _pad_seq(theirs.values, length)], dim=0)
        self.lengths = self.lengths + list(other.lengths)
        self._clear_pending_and_trim()

    def _require_no_pending(self, what: str) -> None:
        if self.has_pending:
            raise RuntimeError(f"{what}: the cache has uncommitted tokens; commit or rollback first")


def _pad_seq(t: torch.Tensor, length: int) -> torch.Tensor:
    """Pad a [B, H, T, D] tensor with zeros along T up to `length` (the padding is stale: never visible)."""
    if t.shape[-2] == length:
        return t
    pad = torch.zeros(*t.shape[:2], length - t.shape[-2], t.shape[-1], dtype=t.dtype)
    return torch.cat([t, pad], dim=-2)
