"""The EAGLE-1 draft head (Li et al., 2024) in the layout SafeAILab/EAGLE writes and TensorRT-LLM reads.

EAGLE-1 drafts at the feature level. At sequence position p it reads the target's feature f_p (the
target's last hidden state *after* its final norm, i.e. what the target's lm_head reads) together with
the embedding of the token x_{p+1} that follows it, and predicts the next feature:

    g_p      = fc([embed(x_{p+1}) ; f_p])           fc: Linear(2H -> H, bias=True), embedding first
    f̂_{p+1}  = DecoderLayer(g_≤p)                  one Llama decoder layer of target width, causal,
                                                    *without* the input RMSNorm in layer 0, no final norm
    logits   = target.lm_head(f̂_{p+1})             the target's LM head, applied directly (no norm)

Drafting step k feeds the head its own predicted features: (f̂_{p+1}, x̂_{p+2}) -> f̂_{p+2}, and so on.
The head owns a copy of the target's token embedding because the real layout stores one
(`embed_tokens.weight`, frozen during training); it never owns an lm_head.

On disk (a folder given to TensorRT-LLM as `--eagle_model_dir`):

    config.json        a LlamaConfig (model_type "llama", num_hidden_layers 1, target width)
    pytorch_model.bin  torch.save'd state dict with exactly these keys:
                         embed_tokens.weight                       [V, H]
                         fc.weight [H, 2H], fc.bias [H]
                         layers.0.self_attn.{q,k,v,o}_proj.weight
                         layers.0.mlp.{gate,up,down}_proj.weight
                         layers.0.post_attention_layernorm.weight  (no layers.0.input_layernorm.weight)

Sources: SafeAILab/EAGLE `eagle/model/cnets1.py` (EAGLE-1 `Model`: `embed_tokens`, `fc =
nn.Linear(2 * hidden, hidden, bias=True)` over `cat((inputs_embeds, hidden_states))`, decoder layer
index 0 skips `input_layernorm`, no final norm) and `ea_model.py` (loads `pytorch_model.bin` with
`strict=True`, applies the base model's lm_head to the head output). TensorRT-LLM
`examples/eagle/convert_checkpoint.py` (reads the folder with `LlamaConfig.from_pretrained` and
`LlamaForCausalLM.from_pretrained`) and `tensorrt_llm/models/eagle/weight.py::load_eagle_hf` (reads
`pytorch_model.bin` for `fc.weight`/`fc.bias`, takes the drafter's embedding and layer from the
folder, skips `input_layernorm`/`ln_f`, reuses the base model's `lm_head`).
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from specbuild.checkpoints.checkpoint_tensors import EAGLE1
from specbuild.errors import UserError
from specbuild.heads._files import read_config, write_json

EAGLE_WEIGHTS_FILE, EAGLE_SAFETENSORS_FILE = EAGLE1.files  # the first is what save_eagle_head writes

# LlamaConfig keys copied from the target into the head's config.json (classic transformers-4 names,
# which transformers 5 still reads; TensorRT-LLM 1.2 pins transformers 4.x).
_TARGET_KEYS = (
    "hidden_size",
    "intermediate_size",
    "num_attention_heads",
    "num_key_value_heads",
    "hidden_act",
    "rms_norm_eps",
    "vocab_size",
    "max_position_embeddings",
    "bos_token_id",
    "eos_token_id",
    "pad_token_id",
)


def _llama_config_from_dict(config: dict):
    from transformers import LlamaConfig

    cfg = LlamaConfig(**{k: v for k, v in config.items() if k not in ("architectures", "model_type")})
    cfg._attn_implementation = "sdpa"
    return cfg


class EagleHeadModule(nn.Module):
    """EAGLE-1 draft head. See the module docstring for the algorithm and the on-disk layout.

    forward(features[B,T,H], input_ids[B,T], position_ids[B,T], attention_mask, past_key_values) -> [B,T,H]

    - `features[:, t]` is the (target or previously drafted) feature at position p_t and `input_ids[:, t]`
      the token that follows it (x_{p_t + 1}); `position_ids[:, t] = p_t` (EAGLE-1 indexes the head's
      sequence by the feature's position, starting at 0).
    - `attention_mask`: additive float mask [B, 1, T, S] (0 = attend, large negative = masked) over
      S = cached length + T keys, e.g. a tree mask; None means plain causal attention.
    - `past_key_values`: a `transformers.DynamicCache` for the head's own KV (the head has 1 layer,
      layer index 0); it is updated in place. None runs without a cache.
    - returns the predicted next features f̂; draft logits are `target.lm_head(f̂)` (no final norm).
    """

    def __init__(self, config, fc_bias: bool = True):
        super().__init__()
        from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding

        self.config = config
        hidden = config.hidden_size
        self.embed_tokens = nn.Embedding(config.vocab_size, hidden)
        self.embed_tokens.weight.requires_grad_(False)  # a frozen copy of the target's embedding
        self.fc = nn.Linear(2 * hidden, hidden, bias=fc_bias)
        self.layers = nn.ModuleList(LlamaDecoderLayer(config, i) for i in range(config.num_hidden_layers))
        self.layers[0].input_layernorm = nn.Identity()  # EAGLE-1: layer 0 has no input norm
        self.rotary_emb = LlamaRotaryEmbedding(config=config)

    @classmethod
    def for_target(cls, target_config, num_layers: int = 1) -> "EagleHeadModule":
        """A freshly initialised head sized for a target LlamaConfig."""
        return cls(_llama_config_from_dict(eagle_config_dict(target_config, num_layers)))

    def forward(
        self,
        features: torch.Tensor,
        input_ids: torch.Tensor,
        position_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        past_key_values=None,
    ) -> torch.Tensor:
        embeds = self.embed_tokens(input_ids).to(features.dtype)
        hidden = self.fc(torch.cat((embeds, features), dim=-1))
        if attention_mask is None:
            past = past_key_values.get_seq_length() if past_key_values is not None else 0
            attention_mask = causal_mask(hidden.shape[0], hidden.shape[1], past, hidden.dtype, hidden.device)
        elif attention_mask.dtype == torch.bool:
            raise TypeError("EagleHeadModule needs an additive float attention_mask (0 / -inf), not a bool mask")
        position_embeddings = self.rotary_emb(hidden, position_ids)
        cache = {cache_kwarg(self.layers[0]): past_key_values}
        for layer in self.layers:
            hidden = layer(
                hidden,
                attention_mask=attention_mask.to(hidden.dtype),
                position_ids=position_ids,
                use_cache=past_key_values is not None,
                position_embeddings=position_embeddings,
                **cache,
            )
        return hidden

    def new_cache(self):
        """An empty `DynamicCache` for this head."""
        from transformers import DynamicCache

        return DynamicCache(config=self.config)

    @torch.no_grad()
    def copy_embedding_from(self, target_model) -> None:
        self.embed_tokens.weight.copy_(target_model.get_input_embeddings().weight)


def cache_kwarg(module: nn.Module) -> str:
    """The keyword a transformers 5.x module takes its KV cache under: `cache` (5.2x) or `past_key_values`."""
    import inspect

    return "cache" if "cache" in inspect.signature(module.forward).parameters else "past_key_values"


def causal_mask(batch: int, length: int, past: int, dtype: torch.dtype, device=None) -> torch.Tensor:
    """Additive causal mask [B, 1, length, past + length]: query i sees keys 0 .. past + i."""
    q = torch.arange(length, device=device)[:, None] + past
    k = torch.arange(past + length, device=device)[None, :]
    mask = torch.zeros(length, past + length, dtype=dtype, device=device)
    mask.masked_fill_(k > q, torch.finfo(dtype).min)
    return mask[None, None].expand(batch, 1, length, past + length)


def eagle_config_dict(target_config, num_layers: int = 1) -> dict:
    """The head's config.json: the target's LlamaConfig shape with `num_hidden_layers = num_layers`."""
    cfg = {k: getattr(target_config, k) for k in _TARGET_KEYS if getattr(target_config, k, None) is not None}
    rope = getattr(target_config, "rope_parameters", None) or {}
    cfg.update(
        architectures=["LlamaForCausalLM"],
        model_type="llama",
        num_hidden_layers=num_layers,
        rope_theta=float(rope.get("rope_theta", getattr(target_config, "rope_theta", 10000.0))),
        rope_scaling=None,
        attention_bias=False,
        mlp_bias=False,
        tie_word_embeddings=False,
    )
    return cfg


def save_eagle_head(head: EagleHeadModule, folder: str | Path, dtype: torch.dtype = torch.float16) -> Path:
    """Write `config.json` + `pytorch_model.bin` (the EAGLE-1 layout above) into `folder`."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().to(dtype).contiguous().clone() for k, v in head.state_dict().items()}
    torch.save(state, folder / EAGLE_WEIGHTS_FILE)
    cfg = eagle_config_dict(head.config, head.config.num_hidden_layers)
    cfg["torch_dtype"] = str(dtype).removeprefix("torch.")
    write_json(folder / "config.json", cfg)
    return folder


def load_eagle_head(folder: str | Path, target_model=None, dtype: torch.dtype = torch.float32) -> EagleHeadModule:
    """Load an EAGLE-1 head folder into an `EagleHeadModule` of `dtype`, in eval mode.

    When `target_model` (a transformers causal LM) is given, the head's width and vocabulary are checked
    against it, and a folder without `embed_tokens.weight` takes the target's embedding.
    """
    folder = Path(folder)
    config = read_config(folder, "EAGLE head")
    weights = folder / EAGLE_WEIGHTS_FILE
    if weights.is_file():
        state = torch.load(weights, map_location="cpu", weights_only=True)
    elif (folder / EAGLE_SAFETENSORS_FILE).is_file():
        from safetensors.torch import load_file

        weights = folder / EAGLE_SAFETENSORS_FILE
        state = load_file(str(weights))
    else:
        raise UserError(
            f"{folder}: no {EAGLE_WEIGHTS_FILE} (or {EAGLE_SAFETENSORS_FILE}); an EAGLE-1 head folder "
            f"holds config.json and its weights (the layout TensorRT-LLM's --eagle_model_dir reads)."
        )
    if "fc.weight" not in state:
        raise UserError(f"{weights}: no 'fc.weight' tensor; this is not an EAGLE-1 draft head.")
    cfg = _llama_config_from_dict({k: v for k, v in config.items() if k != "torch_dtype"})
    if target_model is not None:
        tcfg = target_model.config
        for key in ("hidden_size", "vocab_size"):
            if getattr(cfg, key) != getattr(tcfg, key):
                raise UserError(
                    f"{folder / 'config.json'}: {key}={getattr(cfg, key)} does not match the "
                    f"target's {key}={getattr(tcfg, key)}; use the head trained for this target."
                )
        if "embed_tokens.weight" not in state:
            state["embed_tokens.weight"] = target_model.get_input_embeddings().weight.detach().clone()
    head = EagleHeadModule(cfg, fc_bias="fc.bias" in state)
    missing, unexpected = head.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise UserError(
            f"{weights}: tensors do not match config.json (missing {missing[:4]}, "
            f"unexpected {unexpected[:4]}); fix config.json or the weights."
        )
    return head.to(dtype).eval()
