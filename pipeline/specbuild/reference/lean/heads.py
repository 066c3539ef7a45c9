"""Draft heads on the lean path: EAGLE-1's draft network and Medusa's heads, over the loaded modules' weights.

`LeanEagleHead(head)` runs `specbuild.heads.eagle.EagleHead` (fc over [embed(x); f], then Llama decoder layers,
the first without its input norm, no final norm) through the same position-addressed `KVCache` as the target,
with `DecoderLayer` from layers.py. `StackedMedusa(heads)` evaluates the K heads of a
`specbuild.heads.medusa.MedusaHeads` as a few batched matmuls instead of K small module calls.
Both keep the modules usable: the modules' parameters become views of the stacked tensors.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from specbuild.reference.lean.layers import STATIC_ROPE_TYPES, DecoderLayer, RopeTable


class LeanEagleHead:
    """forward(features [B, S, H], input_ids [B, S], plan, cache) -> predicted features [B, S, H]."""

    def __init__(self, head):
        cfg = head.config
        self.embed = head.embed_tokens.weight
        self.fc_weight, self.fc_bias = head.fc.weight, head.fc.bias
        self.layers = [DecoderLayer.from_hf(layer, cfg) for layer in head.layers]
        self.rope = RopeTable(head.rotary_emb, head.fc.weight.dtype)

    @staticmethod
    def unsupported(head) -> str | None:
        if getattr(head.config, "hidden_act", "silu") != "silu":
            return f"hidden_act={head.config.hidden_act!r}"
        rope_type = getattr(head.rotary_emb, "rope_type", "default")
        if rope_type not in STATIC_ROPE_TYPES:
            return f"rope_type={rope_type!r}"
        return None

    def forward(self, features: torch.Tensor, input_ids: torch.Tensor, plan, cache) -> torch.Tensor:
        embeds = F.embedding(input_ids, self.embed).to(features.dtype)
        h = F.linear(torch.cat((embeds, features), dim=-1), self.fc_weight, self.fc_bias)
        cos, sin = self.rope(plan.position_ids, plan.max_position)
        for i, layer in enumerate(self.layers):
            h = layer(h, cos, sin, cache, i, plan.mask)
        return h


class StackedMedusa:
    """__call__(hidden [B, H]) -> logits [K, B, V] of all K heads: x + SiLU(W_l x + b_l) per ResBlock, then W_k."""

    @torch.no_grad()
    def __init__(self, heads):
        blocks = [list(head)[:-1] for head in heads.heads]  # per head: its ResBlocks
        self.blocks = []
        for level in range(heads.num_layers):
            linears = [b[level].linear for b in blocks]
            self.blocks.append((_stacked(linears, "weight"), _stacked(linears, "bias")[:, None]))
        self.projection = _stacked([head[-1] for head in heads.heads], "weight")  # [K, V, H]

    def __call__(self, hidden: torch.Tensor) -> torch.Tensor:
        x = hidden.expand(self.projection.shape[0], *hidden.shape)
        for weight, bias in self.blocks:
            x = x + F.silu(torch.baddbmm(bias, x, weight.transpose(1, 2)))
        return torch.bmm(x, self.projection.transpose(1, 2))


def _stacked(modules, name: str) -> torch.Tensor:
    """One [K, ...] tensor of the modules' parameter `name`; each module's parameter becomes a view of it."""
    stacked = torch.stack([getattr(m, name).detach() for m in modules])
    for k, m in enumerate(modules):
        getattr(m, name).data = stacked[k]
    return stacked
