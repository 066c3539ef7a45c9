"""Multi-token-prediction (MTP) layers: DeepSeek-V3's next-n prediction modules, stored inside the target checkpoint.

A target trained with MTP (DeepSeek-V3/R1; config.json `num_nextn_predict_layers` N > 0) carries N extra modules after
its L decoder layers. Module k (0-based) is numbered as decoder layer L + k and reads, at sequence position i, the
hidden state h_i that predicts token i+1 and the embedding of token i+1, and predicts token i+2:

    e   = enorm(embed(t_{i+1}))                         the target's embedding (shared)
    h   = hnorm(h_i)                                    h_i: the target's final hidden state, after its final norm
    x   = eh_proj(concat(e, h))                         [2H] -> [H], no bias; the embedding comes first
    x   = one decoder layer of the target's own kind    attention (over this module's own KV cache, at position i)
                                                        and MLP, pre-norm with residuals
    out = shared_head.norm(x)                           fed back as h by MTP-Eagle's next draft
    logits = lm_head(out)                               the target's lm_head (shared)

On disk, in the target's safetensors (DeepSeek-V3 `README_WEIGHTS.md`: the MTP module is layer 61 of the 61-layer
model, in the last shard): `model.layers.{L+k}.` + `enorm.weight`, `hnorm.weight`, `eh_proj.weight` [H, 2H],
`shared_head.norm.weight`, `shared_head.head.weight` [V, H] and `embed_tokens.weight` [V, H] (copies of the main
model's, "shared with the Main Model"), plus the decoder layer's own tensors (`self_attn.*`, `mlp.*`,
`input_layernorm.weight`, `post_attention_layernorm.weight`).

How TensorRT-LLM reads and runs them (the reference for everything here):
- `tensorrt_llm/_torch/models/modeling_deepseekv3.py`@a43cf9e363d5657061b5ce0e12f3d993a08d8158 `DeepseekV3MTP`:
  `eh_proj(concat([enorm(embed_tokens(input_ids)), hnorm(hidden_states)]))`, the decoder layer, then
  `shared_head.norm`; `DeepseekV3MTPHead.forward` applies the target's `lm_head` with no further norm; the target's
  hidden states are the final-normed ones (`post_load_weights`: the last layer's `next_layer_layernorm` is
  `model.norm`). The decoder layer is MoE when `n_routed_experts` is set and `layer_idx >= first_k_dense_replace`
  (and `layer_idx % moe_layer_freq == 0`), else a dense `GatedMLP` (`DeepseekV3DecoderLayer.__init__`): the rule
  decides the MTP layer's MLP too, its layer_idx being L + k.
- `tensorrt_llm/_torch/models/modeling_speculative.py` `MTPForCausalLM` (the copy the fact sheets call SPEC-1.2,
  search index id 54558751816; @b35ac1b64368513d215c57d2ed01d62d910df8da the same for DeepSeek-V3): the one-model path
  shares the target's `embed_tokens` and `lm_head` (the checkpoint's copies inside the MTP layer are not read); MTP-Eagle
  builds one layer and runs it `max_draft_len` times, vanilla MTP builds min(max_draft_len, N) layers. The model types
  with an MTP layer class there: deepseek_v3 / deepseek_v32 / glm_moe_dsa (`DeepseekV3MTP`), glm4_moe, exaone_moe,
  nemotron_h, qwen3_next / qwen3_5. DeepSeek-V3's is the one read here: the reference runtime's cache serves full
  attention only (Qwen3-Next and Nemotron-H mix in linear-attention / Mamba layers), and GLM-4.5's and EXAONE's
  targets are MoE models built around the same module.

transformers (5.25: `models/deepseek_v3/modeling_deepseek_v3.py`, `modeling_layers.py`, `configuration_utils.py`)
loads such a checkpoint's main model and leaves the MTP tensors aside: DeepseekV3's
`_keys_to_ignore_on_load_unexpected` names DeepSeek-V3's layer 61 only, so another layer count is reported as unused
weights; its own MTP generation (`modeling_layers.MtpModel.from_pretrained`) finds MTP tensors through that same
pattern and builds MTP layers as MoE (`get_mtp_config` sets `first_k_dense_replace` to 0). This module reads the
layers itself, with the decoder layer class and MLP rule of the target's own transformers model.
"""

from __future__ import annotations

import copy
import importlib
import json
from pathlib import Path

import torch
from torch import nn

from specbuild.errors import UserError

NUM_LAYERS_KEY = "num_nextn_predict_layers"  # config.json (transformers 5 also calls it num_mtp_layers)
# tensors of the MTP module itself (the rest of `model.layers.{L+k}.*` is its decoder layer)
OWN = ("enorm.", "hnorm.", "eh_proj.", "shared_head.norm.")
SHARED = ("embed_tokens.weight", "shared_head.head.weight")  # copies of the main model's; the target's are used


def mtp_layer_count(config) -> int:
    """How many MTP layers a model config (a transformers config or a config.json dict) says it has (0: none)."""
    value = config.get(NUM_LAYERS_KEY) if isinstance(config, dict) else getattr(config, NUM_LAYERS_KEY, None)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def prefix(config, k: int) -> str:
    """The tensor-name prefix of MTP layer k: `model.layers.{L + k}.`."""
    return f"model.layers.{int(config.num_hidden_layers) + k}."


class MtpLayer(nn.Module):
    """One MTP module over a target of a transformers decoder architecture (DeepseekV3 here).

    forward(hidden [B, S, H], embeds [B, S, H], position_embeddings, attention_mask, position_ids, cache) -> out
    [B, S, H] (after shared_head.norm): entry i reads the target's (or, chained, this layer's own) hidden state of
    position i and the embedding of token i+1; `lm_head(out)` scores token i+2. The attention caches through
    `cache` as decoder layer 0 of a one-layer model (`config` says so: num_hidden_layers 1)."""

    def __init__(self, target_config, k: int = 0):
        super().__init__()
        layer_cls, norm_cls = decoder_classes(target_config)
        index = int(target_config.num_hidden_layers) + k
        self.index = index
        self.block = layer_cls(target_config, index)  # its MLP follows the architecture's rule for layer index
        self.block.self_attn.layer_idx = 0  # the MTP layer's own KV cache holds one layer
        hidden, eps = int(target_config.hidden_size), float(target_config.rms_norm_eps)
        self.enorm = norm_cls(hidden, eps=eps)
        self.hnorm = norm_cls(hidden, eps=eps)
        self.eh_proj = nn.Linear(2 * hidden, hidden, bias=False)
        self.shared_head = nn.Module()
        self.shared_head.norm = norm_cls(hidden, eps=eps)
        self.config = copy.deepcopy(target_config)
        self.config.num_hidden_layers = 1  # for the caches (KVCache, DynamicCache) of this layer alone

    @property
    def hidden_size(self) -> int:
        return int(self.config.hidden_size)

    def forward(
        self,
        hidden: torch.Tensor,
        embeds: torch.Tensor,
        position_embeddings: tuple[torch.Tensor, torch.Tensor],
        attention_mask: torch.Tensor | None,
        position_ids: torch.Tensor,
        cache=None,
    ) -> torch.Tensor:
        x = self.eh_proj(torch.cat([self.enorm(embeds), self.hnorm(hidden)], dim=-1))
        x = self.block(
            x,
            attention_mask=attention_mask,
            position_ids=position_ids,
            cache=cache,
            use_cache=cache is not None,
            position_embeddings=position_embeddings,
        )
        return self.shared_head.norm(x)

    # ------------------------------------------------------------------ on-disk names
    def disk_state(self, config, embed: torch.Tensor, lm_head: torch.Tensor) -> dict[str, torch.Tensor]:
        """This layer's tensors under their checkpoint names (`model.layers.{L+k}.*`), with the copies of the main
        model's embedding and lm_head DeepSeek-V3 stores inside the MTP layer."""
        base = f"model.layers.{self.index}."
        state = {base + disk_name(n): t for n, t in self.state_dict().items()}
        state[base + "embed_tokens.weight"] = embed
        state[base + "shared_head.head.weight"] = lm_head
        return state


def disk_name(module_name: str) -> str:
    """A parameter's name in the checkpoint: the decoder layer's tensors sit directly under `model.layers.{L+k}.`."""
    return module_name.removeprefix("block.")


def module_name(disk: str) -> str:
    return disk if disk.startswith(OWN) else "block." + disk


def decoder_classes(config):
    """The target architecture's decoder-layer and RMSNorm classes (transformers), for the MTP layer's block."""
    arch = (getattr(config, "architectures", None) or [""])[0]
    model_type = getattr(config, "model_type", "")
    if model_type not in SUPPORTED_TYPES:
        raise UserError(
            f"MTP layers of a {arch or model_type} model are not readable here: the reference runtime reads "
            f"the MTP layers of {', '.join(sorted(SUPPORTED_TYPES))} checkpoints (DeepSeek-V3's layout)"
        )
    module = importlib.import_module("transformers" + SUPPORTED_TYPES[model_type])
    return module.DeepseekV3DecoderLayer, module.DeepseekV3RMSNorm


# model_type -> transformers module holding the decoder layer (DeepSeek-V3/R1 and their V3.x successors share it)
SUPPORTED_TYPES = {"deepseek_v3": ".models.deepseek_v3.modeling_deepseek_v3"}


def is_moe_layer(config, index: int) -> bool:
    """Whether decoder layer `index` is MoE by TensorRT-LLM's rule (`DeepseekV3DecoderLayer.__init__`,
    modeling_deepseekv3.py@a43cf9e): n_routed_experts set, index >= first_k_dense_replace, index % moe_layer_freq
    == 0. transformers (5.25) checks only first_k_dense_replace."""
    experts = getattr(config, "n_routed_experts", None)
    first_dense = getattr(config, "first_k_dense_replace", 0) or 0
    freq = getattr(config, "moe_layer_freq", 1) or 1
    return experts is not None and index >= first_dense and index % freq == 0


def _weights_files(folder: Path) -> list[Path]:
    index = sorted(folder.glob("*.safetensors.index.json"))
    if index:
        weight_map = json.loads(index[0].read_text()).get("weight_map", {})
        return [folder / f for f in sorted(set(weight_map.values()))]
    return sorted(folder.glob("*.safetensors"))


def read_mtp_tensors(folder: str | Path, config) -> dict[int, dict[str, torch.Tensor]]:
    """The MTP layers' tensors of a checkpoint folder, per layer k: {disk name without the prefix: tensor}."""
    from safetensors import safe_open

    folder = Path(folder)
    count = mtp_layer_count(config)
    prefixes = {prefix(config, k): k for k in range(count)}
    found: dict[int, dict[str, torch.Tensor]] = {k: {} for k in range(count)}
    files = _weights_files(folder)
    if not files:
        raise UserError(f"{folder}: no *.safetensors file; the MTP layers are read from safetensors weights")
    for path in files:
        with safe_open(str(path), framework="pt") as f:
            for name in f.keys():
                for p, k in prefixes.items():
                    if name.startswith(p):
                        found[k][name[len(p) :]] = f.get_tensor(name)
    return found


def load_mtp_layers(folder: str | Path, target_model, dtype: torch.dtype = torch.float32) -> list[MtpLayer]:
    """The MTP layers stored in a target checkpoint folder, built over `target_model`'s config (a loaded
    transformers model of that folder), in eval mode. Raises UserError naming what is missing or unsupported."""
    folder = Path(folder)
    config = target_model.config
    count = mtp_layer_count(config)
    if count == 0:
        raise UserError(
            f"{folder}/config.json: {NUM_LAYERS_KEY} is not a positive integer: the checkpoint has no MTP layers"
        )
    tensors = read_mtp_tensors(folder, config)
    layers = []
    for k in range(count):
        index = int(config.num_hidden_layers) + k
        if is_moe_layer(config, index):
            raise UserError(
                f"{folder}: MTP layer {index} is MoE (n_routed_experts set and first_k_dense_replace <= {index}); "
                "the reference runtime reads dense MTP layers (first_k_dense_replace > every MTP layer's index)"
            )
        layer = MtpLayer(config, k)
        wanted = {disk_name(n): p for n, p in layer.state_dict().items()}
        have = tensors[k]
        missing = sorted(set(wanted) - set(have))
        if missing:
            raise UserError(
                f"{folder}: MTP layer {index} lacks {len(missing)} tensor(s) "
                f"(model.layers.{index}.{missing[0]}{', ...' if len(missing) > 1 else ''}): config.json says "
                f"{NUM_LAYERS_KEY} = {count} but the weights do not hold them all — exports often drop the MTP layers"
            )
        extra = sorted(set(have) - set(wanted) - set(SHARED))
        if extra:
            raise UserError(
                f"{folder}: MTP layer {index} has tensors this layer does not have "
                f"(model.layers.{index}.{extra[0]}{', ...' if len(extra) > 1 else ''}): not DeepSeek-V3's layout"
            )
        for name, param in wanted.items():
            if tuple(have[name].shape) != tuple(param.shape):
                raise UserError(
                    f"{folder}: model.layers.{index}.{name} has shape {tuple(have[name].shape)}, the config "
                    f"needs {tuple(param.shape)}"
                )
        layer.load_state_dict({module_name(n): have[n] for n in wanted})
        layer.config._attn_implementation = getattr(config, "_attn_implementation", None) or "sdpa"
        layers.append(layer.to(dtype).eval())
    return layers
