"""Draft heads on the lean path: EAGLE-1's and EAGLE-3's draft networks and Medusa's heads, over the loaded
modules' weights.

`LeanEagleHead(head)` runs `specbuild.heads.eagle.EagleHeadModule` (fc over [embed(x); f], then Llama decoder layers,
the first without its input norm, no final norm) through the same position-addressed `KVCache` as the target,
with `DecoderLayer` from layers.py; `LeanEagle3Head(head)` runs `specbuild.heads.eagle3.Eagle3HeadModule` the same way
(its layer's q/k/v over [norm(embedding); norm(x)]). `LeanMedusaHeads(heads)` evaluates the K heads of a
`specbuild.heads.medusa.MedusaHeadsModule` with the first ResBlock of every head fused into one matmul (they all read
the same hidden state). The modules stay usable: fused parameters become views of the fused tensors.
`int8=True` (`draft_dtype: int8`) computes their larger matmuls with `linear.Int8Linear` (see `drafting_linear`).
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

from specbuild.heads.eagle3 import rope_cos_sin
from specbuild.reference.decoder.lean.layers import STATIC_ROPE_TYPES, DecoderLayer, RopeTable, fuse_linears, rms_norm
from specbuild.reference.decoder.lean.linear import drafting_linear


class LeanEagleHead:
    """forward(features [B, S, H], input_ids [B, S], plan, cache) -> predicted features [B, S, H]."""

    def __init__(self, head, int8: bool = False):
        cfg = head.config
        linear = functools.partial(drafting_linear, int8=int8)
        self.embed = head.embed_tokens.weight
        self.fc = linear(head.fc.weight, head.fc.bias)
        self.layers = [DecoderLayer.from_hf(layer, cfg, linear=linear) for layer in head.layers]
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
        h = self.fc(torch.cat((embeds, features), dim=-1))
        cos, sin = self.rope(plan)
        for i, layer in enumerate(self.layers):
            h = layer(h, cos, sin, cache, i, plan.mask)
        return h


class LeanEagle3Head:
    """`specbuild.heads.eagle3.Eagle3HeadModule` on the lean path. forward(x [B, S, n*H_t or H], embeds [B, S, H], plan,
    cache) -> out [B, S, H]: fc when x is wider than H, then its one layer, whose q/k/v read
    [input_layernorm(embeds); hidden_norm(x)] (2H) with x as the residual (DecoderLayer's `attn_input`);
    logits(out) -> [..., V_d] = lm_head(norm(out)). Same arithmetic as the module to float32 rounding."""

    def __init__(self, head, int8: bool = False):
        linear = functools.partial(drafting_linear, int8=int8)
        layer, attn = head.midlayer, head.midlayer.self_attn
        self.hidden = head.hidden_size
        self.fc = linear(head.fc.weight, head.fc.bias) if head.fc is not None else None
        self.input_norm, self.hidden_norm = layer.input_layernorm.weight, layer.hidden_norm.weight
        self.eps = float(layer.input_layernorm.eps)
        wqkv, bqkv = fuse_linears([attn.q_proj, attn.k_proj, attn.v_proj])
        w_gate_up, b_gate_up = fuse_linears([layer.mlp.gate_proj, layer.mlp.up_proj])
        self.layer = DecoderLayer(
            input_norm=None,
            wqkv=wqkv,
            bqkv=bqkv,
            wo=attn.o_proj.weight,
            bo=attn.o_proj.bias,
            post_norm=layer.post_attention_layernorm.weight,
            w_gate_up=w_gate_up,
            b_gate_up=b_gate_up,
            w_down=layer.mlp.down_proj.weight,
            b_down=layer.mlp.down_proj.bias,
            n_heads=attn.heads,
            n_kv_heads=attn.kv_heads,
            head_dim=attn.head_dim,
            eps=self.eps,
            scale=attn.head_dim**-0.5,
            linear=linear,
        )
        # the head's own NeoX RoPE (heads/eagle3.py), called as RopeTable calls a transformers rotary module
        theta, dim = float(layer.theta), attn.head_dim
        self.rope = RopeTable(lambda _probe, positions: rope_cos_sin(positions, theta, dim), head.lm_head.weight.dtype)
        self.norm = head.norm.weight
        self.lm_head = linear(head.lm_head.weight)

    def forward(self, x: torch.Tensor, embeds: torch.Tensor, plan, cache) -> torch.Tensor:
        if self.fc is not None and x.shape[-1] != self.hidden:  # Eagle3HeadModule.fuse
            x = self.fc(x)
        a = torch.cat(
            (rms_norm(embeds.to(x.dtype), self.input_norm, self.eps), rms_norm(x, self.hidden_norm, self.eps)), dim=-1
        )
        cos, sin = self.rope(plan)
        return self.layer(x, cos, sin, cache, 0, plan.mask, attn_input=a)

    def logits(self, out: torch.Tensor) -> torch.Tensor:
        return self.lm_head(rms_norm(out, self.norm, self.eps))


class LeanMedusaHeads:
    """__call__(hidden [B, H]) -> logits [K, B, V] of all K heads (ResBlock x + SiLU(W x + b), then the head's
    projection). Every head reads the same hidden state, so the first ResBlock of all heads is one matmul."""

    @torch.no_grad()
    def __init__(self, heads, vocab: int | None = None, int8: bool = False):
        linear = functools.partial(drafting_linear, int8=int8)
        self.num_heads = heads.num_heads
        blocks = [list(head)[:-1] for head in heads.heads]  # per head: its ResBlocks
        self.first = None
        if heads.num_layers:
            self.first = linear(*fuse_linears([b[0].linear for b in blocks]))
        self.rest = [[linear(b.linear.weight, b.linear.bias) for b in head_blocks[1:]] for head_blocks in blocks]
        # vocab: score only the token ids [0, vocab) (the `draft_vocab_size` option; logits [K, B, vocab])
        self.projections = [
            linear(
                head[-1].weight
                if vocab is None or vocab >= head[-1].weight.shape[0]
                else head[-1].weight.detach()[:vocab].contiguous()
            )
            for head in heads.heads
        ]

    def __call__(self, hidden: torch.Tensor) -> torch.Tensor:
        if self.first is not None:
            first = hidden.repeat(1, self.num_heads) + F.silu(self.first(hidden))  # [B, K * H]
            xs = first.view(hidden.shape[0], self.num_heads, -1).unbind(1)
        else:
            xs = [hidden] * self.num_heads
        out = []
        for x, blocks, projection in zip(xs, self.rest, self.projections):
            for block in blocks:
                x = x + F.silu(block(x))
            out.append(projection(x))
        return torch.stack(out)
