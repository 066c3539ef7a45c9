"""The lean forward of a Llama-architecture causal LM: embedding, decoder layers, final norm.

Built over a loaded transformers model's weights (`LeanLlama(hf_model)`); `unsupported(hf_model)` says why a
model must stay on the transformers path instead (another architecture, a non-SiLU MLP, a dynamic RoPE, extra
norms such as Qwen3's q/k norms), in which case `CausalLM` runs transformers' own decoder.
"""

from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F

from specbuild.reference.decoder.lean.layers import STATIC_ROPE_TYPES, DecoderLayer, RopeTable, rms_norm
from specbuild.reference.decoder.lean.linear import Linear

# Same decoder layer as LlamaDecoderLayer (Qwen2 only adds q/k/v biases); sliding-window configurations are
# refused earlier by CausalLM's cache check.
ARCHITECTURES = ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM")
_LAYER_PARTS = {
    "self_attn": {"q_proj", "k_proj", "v_proj", "o_proj"},
    "mlp": {"gate_proj", "up_proj", "down_proj"},
    "input_layernorm": set(),
    "post_attention_layernorm": set(),
}


def unsupported(hf_model) -> str | None:
    """Why the lean forward cannot run this model (None: it can)."""
    name = type(hf_model).__name__
    if name not in ARCHITECTURES:
        return f"{name} is not one of {', '.join(ARCHITECTURES)}"
    cfg = hf_model.config
    if getattr(cfg, "hidden_act", "silu") != "silu":
        return f"hidden_act={cfg.hidden_act!r} (the lean MLP is SiLU-gated)"
    decoder = hf_model.get_decoder()
    rope_type = getattr(decoder.rotary_emb, "rope_type", "default")
    if rope_type not in STATIC_ROPE_TYPES:
        return f"rope_type={rope_type!r} depends on the sequence length"
    for i, layer in enumerate(decoder.layers):
        children = {n: {c for c, _ in m.named_children()} for n, m in layer.named_children()}
        for part, needed in _LAYER_PARTS.items():
            if (
                part not in children
                or not needed <= children[part]
                or (needed and children[part] - needed - {"act_fn"})
            ):
                return (
                    f"decoder layer {i} has parts {sorted(children)} / {children.get(part)} that the lean layer lacks"
                )
        if set(children) - set(_LAYER_PARTS):
            return f"decoder layer {i} has extra parts {sorted(set(children) - set(_LAYER_PARTS))}"
        norms = (type(layer.input_layernorm).__name__, type(layer.post_attention_layernorm).__name__)
        if not all(n.endswith("RMSNorm") for n in norms):
            return f"decoder layer {i} uses {norms} (the lean layer has RMSNorms)"
    return None


class LeanLlama:
    """forward(input_ids [B, S], plan, cache, capture_layers) -> (hidden [B, S, H] after the final norm,
    captured [B, S, len(capture_layers) * H] or None); lm_head(hidden) -> logits."""

    def __init__(self, hf_model):
        decoder = hf_model.get_decoder()
        cfg = hf_model.config
        dtype = decoder.embed_tokens.weight.dtype
        self.embed = decoder.embed_tokens.weight
        self.layers = [DecoderLayer.from_hf(layer, cfg) for layer in decoder.layers]
        self.norm, self.eps = decoder.norm.weight, float(cfg.rms_norm_eps)
        self.rope = RopeTable(decoder.rotary_emb, dtype)
        out = hf_model.get_output_embeddings().weight
        # tied embeddings: the lm_head gets its own copy, so that a column-major relayout (lean/linear.py) leaves
        # the embedding's rows contiguous for the lookup
        self.lm_head = Linear(out.detach() if out is self.embed else out)

    def forward(self, input_ids: torch.Tensor, plan, cache, capture_layers: Sequence[int] = ()):
        x = F.embedding(input_ids, self.embed)
        cos, sin = self.rope(plan)
        outputs: dict[int, torch.Tensor] = {}
        for i, layer in enumerate(self.layers):
            x = layer(x, cos, sin, cache, i, plan.mask)
            if i in capture_layers:
                outputs[i] = x
        captured = torch.cat([outputs[i] for i in capture_layers], dim=-1) if capture_layers else None
        return rms_norm(x, self.norm, self.eps), captured
