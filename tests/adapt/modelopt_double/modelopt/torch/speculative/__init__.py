"""convert(model, [("eagle", cfg)]) of nvidia-modelopt 0.47.0, checked as the real one checks it (see modelopt/__init__)."""

import os
import types

import torch
from torch import nn

from modelopt import record

from . import utils  # noqa: F401

# EagleConfig's fields (modelopt/torch/speculative/config.py of 0.47.0): anything else is a pydantic error there
EAGLE_FIELDS = {
    "eagle_offline",
    "eagle_hidden_state_distillation",
    "eagle_self_logit_distillation",
    "eagle_freeze_base_model",
    "eagle_report_acc",
    "eagle_reuse_base_decoder",
    "eagle_loss_decay_factor",
    "eagle_architecture_config",
    "eagle_decoder_type",
    "eagle_ttt_steps",
    "eagle_mix_hidden_states",
    "eagle_use_torch_compile",
    "eagle_enable_nvtx",
    "eagle_export_rope_scaling",
    "eagle_base_lora",
    "eagle_base_lora_rank",
    "eagle_base_lora_alpha",
    "eagle_base_lora_target_modules",
    "eagle_base_lora_preservation_loss_weight",
    "eagle_base_lora_warmup_steps",
    "eagle_base_lora_start_layer",
    "eagle_base_lora_logits_detach_prob",
}
# eagle3_default_config (eagle/default_config.py + config.py's EAGLE-3 update)
EAGLE3_DEFAULT = {
    "hidden_act": "silu",
    "torch_dtype": "bfloat16",
    "rope_theta": 10000,
    "num_hidden_layers": 1,
    "intermediate_size": 14336,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "rms_norm_eps": 1e-05,
    "mlp_bias": False,
    "attention_bias": False,
    "use_aux_hidden_state": True,
    "use_last_layernorm": True,
    "eagle_aux_hidden_state_layer_ids": [],
    "has_lm_head": False,
    "head_dim": 128,
}
OFFLINE_KEYS = {
    "base_model_hidden_states",
    "aux_hidden_states",
    "base_model_logits",
    "base_model_input_embeds",
    "base_hidden_prenorm",
}


class _Layer(nn.Module):
    def __init__(self, c):
        super().__init__()
        hidden, q, kv = c.hidden_size, c.num_attention_heads * c.head_dim, c.num_key_value_heads * c.head_dim
        self.self_attn = nn.Module()
        self.self_attn.q_proj = nn.Linear(2 * hidden, q, bias=c.attention_bias)
        self.self_attn.k_proj = nn.Linear(2 * hidden, kv, bias=c.attention_bias)
        self.self_attn.v_proj = nn.Linear(2 * hidden, kv, bias=c.attention_bias)
        self.self_attn.o_proj = nn.Linear(q, hidden, bias=c.attention_bias)
        self.mlp = nn.Module()
        self.mlp.gate_proj = nn.Linear(hidden, c.intermediate_size, bias=c.mlp_bias)
        self.mlp.up_proj = nn.Linear(hidden, c.intermediate_size, bias=c.mlp_bias)
        self.mlp.down_proj = nn.Linear(c.intermediate_size, hidden, bias=c.mlp_bias)
        self.input_layernorm = nn.Module()
        self.input_layernorm.weight = nn.Parameter(torch.ones(hidden))
        self.post_attention_layernorm = nn.Module()
        self.post_attention_layernorm.weight = nn.Parameter(torch.ones(hidden))
        self.hidden_norm = nn.Module()
        self.hidden_norm.weight = nn.Parameter(torch.ones(hidden))


class EagleModule(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.layers = nn.ModuleList([_Layer(c)])
        self.norm = nn.Module()
        self.norm.weight = nn.Parameter(torch.ones(c.hidden_size))
        if c.draft_vocab_size != c.vocab_size or c.has_lm_head:
            if c.draft_vocab_size < c.vocab_size:
                self.register_buffer("d2t", torch.zeros(c.draft_vocab_size, dtype=torch.int64))
            self.lm_head = nn.Linear(c.hidden_size, c.draft_vocab_size, bias=False)
        self.fc = nn.Linear(len(c.eagle_aux_hidden_state_layer_ids) * c.hidden_size, c.hidden_size, bias=False)


def _forward(self, input_ids, attention_mask=None, loss_mask=None, **kwargs):
    assert self.eagle_offline and "base_model_outputs" in kwargs, "offline training needs base_model_outputs"
    outputs = kwargs["base_model_outputs"]
    assert set(outputs) <= OFFLINE_KEYS, f"unknown base_model_outputs keys {set(outputs) - OFFLINE_KEYS}"
    b, t = input_ids.shape
    c = self.eagle_config
    final, aux = outputs["base_model_hidden_states"], outputs["aux_hidden_states"]
    assert final.shape == (b, t, c.hidden_size), final.shape
    assert aux.shape == (b, t, len(c.eagle_aux_hidden_state_layer_ids) * c.hidden_size), aux.shape
    assert loss_mask is not None and loss_mask.shape == (b, t) and loss_mask.dtype == torch.bool
    assert attention_mask is not None and attention_mask.shape == (b, t)
    if self.training:
        if self._ttt_length is None:
            self._ttt_length = t
        assert t == self._ttt_length, "hf_eagle.py caches its TTT masks at the first batch's length"
    module = self.eagle_module
    base = self.lm_head(final)
    if hasattr(module, "d2t"):
        base = base[:, :, torch.arange(len(module.d2t)) + module.d2t]
    x = module.fc(aux)
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * module.norm.weight
    logits = module.lm_head(x)
    target = base.argmax(-1)[:, 1:]
    scored = loss_mask[:, 1:].float()
    picked = torch.log_softmax(logits[:, :-1], -1).gather(-1, target[..., None])[..., 0]
    loss = -(picked * scored).sum() / scored.sum().clamp(min=1)
    acc = ((logits[:, :-1].argmax(-1) == target).float() * scored).sum() / scored.sum().clamp(min=1)
    steps = self.eagle_ttt_steps if self.training else 1
    return types.SimpleNamespace(loss=loss, train_acc=[[float(acc)] * steps], logits=base)


def convert(model, mode):
    if os.environ.get("MODELOPT_DOUBLE_FAIL") == "convert":
        raise RuntimeError("double: convert failed as asked")
    assert isinstance(mode, list) and len(mode) == 1 and mode[0][0] == "eagle", "mode: [('eagle', config)]"
    config = mode[0][1]
    unknown = set(config) - EAGLE_FIELDS
    assert not unknown, f"EagleConfig has no fields {unknown}"
    assert config.get("eagle_decoder_type", "llama") == "llama"
    arch = {**EAGLE3_DEFAULT, **config.get("eagle_architecture_config", {})}
    arch["hidden_size"] = model.config.hidden_size
    arch["vocab_size"] = model.config.vocab_size
    arch.setdefault("draft_vocab_size", arch["vocab_size"])
    c = types.SimpleNamespace(**arch)
    for p in model.parameters():
        p.requires_grad = False
    model.eagle_module = EagleModule(c)
    model.eagle_config = c
    model.eagle_offline = config.get("eagle_offline", False)
    model.eagle_ttt_steps = config.get("eagle_ttt_steps", 3)
    model.eagle_export_rope_scaling = config.get(
        "eagle_export_rope_scaling", {"rope_type": "yarn", "factor": 32.0, "original_max_position_embeddings": 2048}
    )
    model._ttt_length = None
    model._modelopt_state = [("eagle", config)]
    type(model).forward = _forward
    record("convert", config=config)
    return model
