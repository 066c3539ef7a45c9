"""Plain building blocks of a Llama-architecture decoder, over a checkpoint's own weight tensors.

gpt-fast's shape (pytorch-labs/gpt-fast `model.py`: `Attention` with one fused `wqkv`, `FeedForward`, `RMSNorm`,
RoPE from a precomputed table, a KV cache written by position), without a generate loop: each call is one
forward through a `KVCache` that a `ForwardPlan` has prepared. The arithmetic follows transformers'
`models/llama/modeling_llama.py` (RMSNorm in float32 then cast, `q * cos + rotate_half(q) * sin`,
`down(silu(gate(x)) * up(x))`), so logits agree with transformers' forward to float32 rounding.

Fusing q/k/v (and gate/up) into one matrix saves a matmul call per projection; the transformers modules keep
working on views of the fused tensors, so no weight is held twice.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from specbuild.reference.decoder.lean.linear import Linear, column_major_layout

# RoPE kinds whose cos/sin depend on the position only (a table can hold them); "dynamic" and "longrope"
# rescale with the sequence length seen so far.
STATIC_ROPE_TYPES = ("default", "linear", "llama3", "yarn")


def rms_norm(x: torch.Tensor, weight: torch.Tensor | None, eps: float) -> torch.Tensor:
    """transformers' LlamaRMSNorm: normalise in float32, cast back, scale. weight None: no norm at all."""
    if weight is None:
        return x
    if x.dtype == torch.float32:
        return torch.rms_norm(x, (x.shape[-1],), weight, eps)
    return weight * torch.rms_norm(x.float(), (x.shape[-1],), None, eps).to(x.dtype)


class RopeTable:
    """cos/sin of every position up to the highest one seen, computed once by the checkpoint's own rotary
    module (so every static RoPE variant and its attention scaling come out as transformers computes them).

    transformers rotates with `x * cos + rotate_half(x) * sin`, rotate_half(x) = cat(-x2, x1); the table keeps
    sin with the first half negated, so that the same products are `x.roll(half) * signed_sin` (bit-identical,
    fewer tensor operations per layer)."""

    def __init__(self, rotary_emb, dtype: torch.dtype):
        self.rotary = rotary_emb
        self.dtype = dtype
        self.table = torch.empty(0, 2, 0, dtype=dtype)  # [positions, (cos, signed sin), head_dim]

    def __call__(self, plan) -> tuple[torch.Tensor, torch.Tensor]:
        """(cos, signed sin), each [B, 1, S, head_dim] (or [1, 1, S, head_dim] for rows that share a chain of
        positions: a slice of the table, no gather), at a ForwardPlan's position_ids [B, S]."""
        if plan.max_position >= self.table.shape[0]:
            self._grow(plan.max_position + 1)
        if plan.chain_start is not None:
            both = self.table[plan.chain_start : plan.chain_start + plan.width][None]  # [1, S, 2, D]
        else:
            both = self.table[plan.position_ids]  # [B, S, 2, D]
        return both[:, None, :, 0], both[:, None, :, 1]

    @torch.no_grad()
    def _grow(self, n: int) -> None:
        n = max(n, 2 * self.table.shape[0], 1024)
        probe = torch.empty(0, dtype=self.dtype)
        cos, sin = self.rotary(probe, torch.arange(n)[None])
        cos, sin = cos[0].to(self.dtype), sin[0].to(self.dtype)
        half = sin.shape[-1] // 2
        signed = torch.cat((-sin[:, :half], sin[:, half:]), dim=-1)
        self.table = torch.stack([cos, signed], dim=1)


def rotate(x: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor) -> torch.Tensor:
    """RoPE: x * cos + rotate_half(x) * sin, with the table's signed sin (see RopeTable)."""
    return x * cos + x.roll(x.shape[-1] // 2, dims=-1) * signed_sin


def fuse_linears(linears) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One weight (and bias) stacking the outputs of several nn.Linear over the same input; each module's
    parameters become views of it (same values, one copy in memory). Laid out column-major where `Linear`'s plan for
    the fused shape wants it so (lean/linear.py), so that `Linear` keeps this copy rather than making another."""
    shape = (sum(m.weight.shape[0] for m in linears), linears[0].weight.shape[1])
    if column_major_layout(linears[0].weight.dtype, shape):
        weight = torch.cat([m.weight.detach().t() for m in linears], dim=1).t()
    else:
        weight = torch.cat([m.weight.detach() for m in linears])
    biased = [m.bias is not None for m in linears]
    bias = None
    if any(biased):
        bias = torch.cat(
            [m.bias.detach() if m.bias is not None else weight.new_zeros(m.weight.shape[0]) for m in linears]
        )
    start = 0
    for m in linears:
        n = m.weight.shape[0]
        m.weight.data = weight[start : start + n]
        if m.bias is not None:
            m.bias.data = bias[start : start + n]
        start += n
    return weight, bias


class DecoderLayer:
    """One pre-norm decoder layer: x + attention(norm(x)), then + mlp(norm(.)). `input_norm=None` skips the
    first norm (EAGLE-1's draft layer)."""

    def __init__(
        self,
        *,
        input_norm,
        wqkv,
        bqkv,
        wo,
        bo,
        post_norm,
        w_gate_up,
        b_gate_up,
        w_down,
        b_down,
        n_heads: int,
        n_kv_heads: int,
        head_dim: int,
        eps: float,
        scale: float,
        linear=Linear,
    ):
        """linear: what computes the four matmuls (`Linear`; a drafter's may be `linear.drafting_linear`)."""
        self.input_norm, self.post_norm, self.eps = input_norm, post_norm, eps
        self.wqkv = wqkv
        self.qkv, self.o = linear(wqkv, bqkv), linear(wo, bo)
        self.gate_up, self.down = linear(w_gate_up, b_gate_up), linear(w_down, b_down)
        self.n_heads, self.n_qk, self.head_dim, self.scale = n_heads, n_heads + n_kv_heads, head_dim, scale
        self.gqa = n_heads != n_kv_heads
        self.intermediate = w_down.shape[1]

    @classmethod
    @torch.no_grad()
    def from_hf(cls, layer, config, linear=Linear) -> "DecoderLayer":
        """From a transformers LlamaDecoderLayer (or a layer with the same parts: Mistral, Qwen2)."""
        attn, mlp = layer.self_attn, layer.mlp
        wqkv, bqkv = fuse_linears([attn.q_proj, attn.k_proj, attn.v_proj])
        w_gate_up, b_gate_up = fuse_linears([mlp.gate_proj, mlp.up_proj])
        head_dim = int(attn.head_dim)
        input_norm = getattr(layer.input_layernorm, "weight", None)  # nn.Identity (EAGLE-1 layer 0): no norm
        return cls(
            input_norm=input_norm,
            wqkv=wqkv,
            bqkv=bqkv,
            wo=attn.o_proj.weight,
            bo=attn.o_proj.bias,
            post_norm=layer.post_attention_layernorm.weight,
            w_gate_up=w_gate_up,
            b_gate_up=b_gate_up,
            w_down=mlp.down_proj.weight,
            b_down=mlp.down_proj.bias,
            n_heads=attn.q_proj.weight.shape[0] // head_dim,
            n_kv_heads=attn.k_proj.weight.shape[0] // head_dim,
            head_dim=head_dim,
            eps=float(config.rms_norm_eps),
            scale=float(attn.scaling),
            linear=linear,
        )

    def __call__(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        cache,
        index: int,
        mask: torch.Tensor | None,
        attn_input: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """x [B, S, H] -> [B, S, H]; writes this layer's keys and values into `cache` (layer `index`).
        attn_input: what q/k/v project instead of norm(x) (EAGLE-3's [norm(embedding); norm(x)], 2H wide)."""
        batch, width, _ = x.shape
        h = rms_norm(x, self.input_norm, self.eps) if attn_input is None else attn_input
        qkv = self.qkv(h).view(batch, width, -1, self.head_dim).transpose(1, 2)
        qk = qkv[:, : self.n_qk]
        qk = rotate(qk, cos, sin)  # RoPE on queries and keys at once
        keys, values = cache.write(index, qk[:, self.n_heads :], qkv[:, self.n_qk :])
        attn = F.scaled_dot_product_attention(
            qk[:, : self.n_heads], keys, values, attn_mask=mask, scale=self.scale, enable_gqa=self.gqa
        )
        x = x + self.o(attn.transpose(1, 2).reshape(batch, width, -1))
        h = rms_norm(x, self.post_norm, self.eps)
        gate_up = self.gate_up(h)
        gate, up = gate_up[..., : self.intermediate], gate_up[..., self.intermediate :]
        return x + self.down(F.silu(gate) * up)
