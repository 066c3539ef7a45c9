"""The EAGLE-3 draft head (Li et al., 2025) in the layout SafeAILab/EAGLE's trainer writes and TensorRT-LLM loads.

EAGLE-3 drafts from features *fused from several target layers*, with its own (smaller) output vocabulary:

    first pass   x = fc(concat(h_l1, ..., h_ln))            h_l: output of target decoder layer l (residual
                                                             stream, before the final norm); fc: n*H_t -> H, no bias
    later passes x = the head's own previous `out`           (fc runs only when the width is not H)
    layer        a   = concat(input_layernorm(embed(token)), hidden_norm(x))        the embedding comes first
                 h   = o_proj(Attention(q, k, v = q/k/v_proj(a))) + x               causal over the head's KV, NeoX RoPE
                 out = mlp(post_attention_layernorm(h)) + h                         fed back as the next pass's x
    logits       lm_head(norm(out))                          [V_d], the draft vocabulary
    token        i + d2t[i] for the draft index i            the target id

At sequence position p the head reads (target features at p, embedding of token p+1) and predicts token p+2. The
embedding is the target's own (shared, never stored: `hidden_size` equals the target's). One decoder layer.

On disk (a folder given to TensorRT-LLM as `speculative_config.speculative_model`):

    config.json         an HF LlamaConfig (model_type "llama", architectures ["LlamaForCausalLMEagle3"]) with
                        num_hidden_layers 1, the draft's hidden/intermediate/heads, vocab_size (V, the target's),
                        draft_vocab_size (V_d), bias false, and eagle_config.eagle_aux_hidden_state_layer_ids
                        (the target layers it was trained on; ModelOpt's key, TensorRT-LLM reads the layers from
                        speculative_config.eagle3_layers_to_capture instead)
    model.safetensors   exactly these tensors (no embed_tokens: it is the target's):
                          fc.weight                                  [H, n*H_t]   (only when n > 1)
                          midlayer.input_layernorm.weight            [H]
                          midlayer.hidden_norm.weight                [H]
                          midlayer.self_attn.q_proj.weight           [A*D, 2H]
                          midlayer.self_attn.k_proj.weight           [Kv*D, 2H]
                          midlayer.self_attn.v_proj.weight           [Kv*D, 2H]
                          midlayer.self_attn.o_proj.weight           [H, A*D]
                          midlayer.post_attention_layernorm.weight   [H]
                          midlayer.mlp.gate_proj.weight, up_proj     [I, H]
                          midlayer.mlp.down_proj.weight              [H, I]
                          norm.weight                                [H]
                          lm_head.weight                             [V_d, H]
                          d2t                                        [V_d] int64: target id = i + d2t[i]
                          t2d                                        [V] bool: which target ids are in the draft vocab
`pytorch_model.bin` (what EAGLE's DeepSpeed export writes) with the same keys is read too, and the layer named
`layers.0.*` (NVIDIA Model-Optimizer's export) as TensorRT-LLM reads it: as `midlayer.*`.

Sources: TensorRT-LLM `tensorrt_llm/_torch/models/modeling_speculative.py` (`Eagle3DecoderLayer`: residual =
hidden, input_layernorm on the embedding and hidden_norm on the hidden, cat([embeds, hidden]), qkv over 2H;
`Eagle3DraftModel`: fc over n*target_hidden, `norm`, a `d2t` int64 parameter when draft_vocab_size != vocab_size,
the target's embedding when target_hidden_size is absent; `Eagle3ForCausalLM.apply_eagle3_fc`, `load_weights`),
`tensorrt_llm/_torch/speculative/drafting_loops.py` (`ChainDrafter.sample`: tokens + d2t[tokens]), SafeAILab/EAGLE
`eagle/traineagle3/cnets.py` (the draft vocabulary: most frequent tokens sorted by id, d2t/t2d), ModelOpt
`hf_spec_export.py` (the required/optional key list).
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import torch
from torch import nn

from specbuild.checkpoints.checkpoint_tensors import EAGLE3
from specbuild.errors import UserError
from specbuild.heads._files import read_config, require_key, write_json
from specbuild.heads.eagle import causal_mask

WEIGHTS_FILE, LEGACY_WEIGHTS_FILE = EAGLE3.files  # the second: EAGLE's DeepSpeed `save_16bit_model` output
ARCHITECTURE = "LlamaForCausalLMEagle3"
# eagle_config switches of TensorRT-LLM's newer loader that change the network; only their defaults are implemented
_ARCH_SWITCHES = {"eh_proj_before_attn": False, "norm_before_fc": False, "return_hidden_post_norm": False}


def trtllm_default_layers(num_layers: int) -> tuple[int, ...] | None:
    """TensorRT-LLM's default capture set {1, L//2 - 1, L - 4} (L = 1: (0,)); None where it refuses (1 < L <= 5)."""
    if num_layers == 1:
        return (0,)
    if num_layers <= 5:
        return None
    return tuple(sorted({1, num_layers // 2 - 1, num_layers - 4}))


def draft_vocabulary(counts: torch.Tensor, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """EAGLE's draft vocabulary from token counts [V]: the `size` most frequent ids (ties: the lower id), sorted by
    id. Returns d2t [size] int64 (target id = i + d2t[i]) and t2d [V] bool."""
    vocab = counts.numel()
    if not 0 < size <= vocab:
        raise ValueError(f"draft vocabulary size {size} must be in 1..{vocab}")
    order = sorted(range(vocab), key=lambda t: (-int(counts[t]), t))[:size]
    used = torch.tensor(sorted(order), dtype=torch.long)
    t2d = torch.zeros(vocab, dtype=torch.bool)
    t2d[used] = True
    return used - torch.arange(size), t2d


class RMSNorm(nn.Module):
    """w * x / sqrt(mean(x^2) + eps), computed in float32 and cast back (EAGLE `cnets.py`, TensorRT-LLM RMSNorm)."""

    def __init__(self, hidden: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(x.dtype)


def rope_cos_sin(position_ids: torch.Tensor, theta: float, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin [B, T, dim] (float32) of the NeoX-style rotary embedding at positions [B, T]."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    angles = position_ids.float()[..., None] * inv_freq  # [B, T, D/2]
    angles = torch.cat((angles, angles), dim=-1)  # [B, T, D]
    return angles.cos(), angles.sin()


def rope(x: torch.Tensor, position_ids: torch.Tensor, theta: float) -> torch.Tensor:
    """NeoX-style rotary embedding (`rope_gpt_neox`) of x [B, heads, T, D] at positions [B, T]."""
    dim = x.shape[-1]
    cos, sin = rope_cos_sin(position_ids, theta, dim)
    cos, sin = cos[:, None].to(x.dtype), sin[:, None].to(x.dtype)  # [B, 1, T, D]
    half = dim // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


class Eagle3Attention(nn.Module):
    def __init__(self, config):
        super().__init__()
        hidden, heads = config.hidden_size, config.num_attention_heads
        self.heads, self.kv_heads = heads, config.num_key_value_heads
        self.head_dim = hidden // heads
        bias = bool(config.attention_bias)
        self.q_proj = nn.Linear(2 * hidden, heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(2 * hidden, self.kv_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(2 * hidden, self.kv_heads * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(heads * self.head_dim, hidden, bias=bias)

    def qkv(self, a: torch.Tensor, position_ids: torch.Tensor, theta: float):
        """Queries [B, A, T, D] and keys/values [B, Kv, T, D] (RoPE applied) of the layer input a [B, T, 2H]."""
        b, t, _ = a.shape
        q = self.q_proj(a).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(a).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(a).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        return rope(q, position_ids, theta), rope(k, position_ids, theta), v

    def expand_kv(self, x: torch.Tensor) -> torch.Tensor:
        """Grouped-query attention: repeat each KV head for its query heads."""
        repeat = self.heads // self.kv_heads
        return x if repeat == 1 else x.repeat_interleave(repeat, dim=1)


class Eagle3MLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        bias = bool(config.mlp_bias)
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=bias)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=bias)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))


class Eagle3Layer(nn.Module):
    """The single decoder layer (`midlayer`). Split into `project` and `finish` so that training can run its own
    attention pattern (EAGLE-3's training-time test) between them."""

    def __init__(self, config):
        super().__init__()
        eps = config.rms_norm_eps
        self.input_layernorm = RMSNorm(config.hidden_size, eps)
        self.hidden_norm = RMSNorm(config.hidden_size, eps)
        self.self_attn = Eagle3Attention(config)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, eps)
        self.mlp = Eagle3MLP(config)
        self.theta = config.rope_theta

    def project(self, hidden: torch.Tensor, embeds: torch.Tensor, position_ids: torch.Tensor):
        """q, k, v of the entries (hidden x, token embedding) [B, T, H] each."""
        a = torch.cat((self.input_layernorm(embeds), self.hidden_norm(hidden)), dim=-1)
        return self.self_attn.qkv(a, position_ids, self.theta)

    def finish(self, attended: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        """attended [B, A, T, D] (attention output per head) -> the layer output `out` [B, T, H]."""
        b, _, t, _ = attended.shape
        h = self.self_attn.o_proj(attended.transpose(1, 2).reshape(b, t, -1)) + residual
        return self.mlp(self.post_attention_layernorm(h)) + h


class Eagle3HeadModule(nn.Module):
    """EAGLE-3 draft head. See the module docstring for the algorithm and the on-disk layout.

    fuse(captured [..., n*H_t]) -> x [..., H]        fc over the captured target states (identity if already H wide)
    forward(x, embeds, position_ids, attention_mask=None, cache=None) -> out [B, T, H]
        x: hidden input (`fuse`d target states or the head's own previous `out`); embeds: the target's embedding
        of the token after each entry; attention_mask: additive float [B, 1, T, S] over S = cached + T keys (None:
        causal); cache: a `transformers.DynamicCache` of one layer (`new_cache()`), updated in place.
    logits(out) -> [..., V_d];  to_target(draft ids) -> target ids

    `settings` is the config.json dict; `config` the LlamaConfig view of it (for caches).
    """

    def __init__(self, settings: dict, num_captured: int):
        super().__init__()
        self.settings = dict(settings)
        self.config = config_from_dict(self.settings)
        view = _view(self.settings)
        self.num_captured = num_captured
        hidden = view.hidden_size
        target_hidden = view.target_hidden_size or hidden
        self.fc = nn.Linear(num_captured * target_hidden, hidden, bias=bool(view.bias)) if num_captured > 1 else None
        self.midlayer = Eagle3Layer(view)
        self.norm = RMSNorm(hidden, view.rms_norm_eps)
        self.lm_head = nn.Linear(hidden, view.draft_vocab_size, bias=False)
        self.register_buffer("d2t", torch.zeros(view.draft_vocab_size, dtype=torch.long))
        self.register_buffer("t2d", torch.full((view.vocab_size,), view.draft_vocab_size == view.vocab_size))

    @property
    def hidden_size(self) -> int:
        return int(self.settings["hidden_size"])

    @property
    def vocab_size(self) -> int:
        return int(self.settings["vocab_size"])

    @property
    def draft_vocab_size(self) -> int:
        return self.lm_head.weight.shape[0]

    @property
    def layers(self) -> tuple[int, ...] | None:
        """The target layers recorded in config.json (eagle_config.eagle_aux_hidden_state_layer_ids), if any."""
        return recorded_layers(self.settings)

    def fuse(self, captured: torch.Tensor) -> torch.Tensor:
        if captured.shape[-1] == self.hidden_size:  # TensorRT-LLM `apply_eagle3_fc`: fc only on wider inputs
            return captured
        return self.fc(captured)

    def forward(
        self,
        x: torch.Tensor,
        embeds: torch.Tensor,
        position_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        cache=None,
    ) -> torch.Tensor:
        x = self.fuse(x)
        q, k, v = self.midlayer.project(x, embeds.to(x.dtype), position_ids)
        if cache is not None:
            k, v = cache.update(k, v, 0)
        if attention_mask is None:
            attention_mask = causal_mask(x.shape[0], x.shape[1], k.shape[-2] - x.shape[1], x.dtype)
        elif attention_mask.dtype == torch.bool:
            raise TypeError("Eagle3HeadModule needs an additive float attention_mask (0 / -inf), not a bool mask")
        attn = self.midlayer.self_attn
        attended = nn.functional.scaled_dot_product_attention(
            q, attn.expand_kv(k), attn.expand_kv(v), attn_mask=attention_mask.to(q.dtype)
        )
        return self.midlayer.finish(attended, x)

    def logits(self, out: torch.Tensor) -> torch.Tensor:
        return self.lm_head(self.norm(out))

    def to_target(self, draft_ids: torch.Tensor) -> torch.Tensor:
        return draft_ids + self.d2t[draft_ids]

    @property
    def draft_to_target(self) -> torch.Tensor:
        """Target id of every draft index [V_d]."""
        return self.to_target(torch.arange(self.draft_vocab_size, device=self.d2t.device))

    def new_cache(self):
        from transformers import DynamicCache

        return DynamicCache(config=self.config)

    @torch.no_grad()
    def set_vocabulary(self, d2t: torch.Tensor, t2d: torch.Tensor) -> None:
        self.d2t.copy_(d2t)
        self.t2d.copy_(t2d)


_DEFAULTS = {
    "target_hidden_size": None,
    "bias": False,
    "attention_bias": False,
    "mlp_bias": False,
    "rope_theta": 10000.0,
    "draft_vocab_size": None,
    "num_key_value_heads": None,
}


def _view(settings: dict):
    """Attribute access to a config.json dict with the defaults TensorRT-LLM applies."""
    from types import SimpleNamespace

    view = SimpleNamespace(**{**_DEFAULTS, **settings})
    view.draft_vocab_size = int(view.draft_vocab_size or view.vocab_size)
    view.num_key_value_heads = int(view.num_key_value_heads or view.num_attention_heads)
    view.rope_theta = float(view.rope_theta or 10000.0)
    return view


def eagle3_config_dict(
    target_config, *, layers: Sequence[int], draft_vocab_size: int, intermediate_size: int | None = None
) -> dict:
    """The head's config.json for a target LlamaConfig: the target's width, heads and vocabulary, one layer."""
    rope = getattr(target_config, "rope_parameters", None) or {}
    cfg = {
        "architectures": [ARCHITECTURE],
        "model_type": "llama",
        "hidden_size": target_config.hidden_size,
        "intermediate_size": intermediate_size or target_config.intermediate_size,
        "num_attention_heads": target_config.num_attention_heads,
        "num_key_value_heads": getattr(target_config, "num_key_value_heads", None) or target_config.num_attention_heads,
        "num_hidden_layers": 1,
        "hidden_act": "silu",
        "rms_norm_eps": target_config.rms_norm_eps,
        "max_position_embeddings": target_config.max_position_embeddings,
        "rope_theta": float(rope.get("rope_theta", getattr(target_config, "rope_theta", None) or 10000.0)),
        "rope_scaling": None,
        "vocab_size": target_config.vocab_size,
        "draft_vocab_size": int(draft_vocab_size),
        "attention_bias": False,
        "mlp_bias": False,
        "bias": False,
        "tie_word_embeddings": False,
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": [int(i) for i in layers]},
    }
    for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
        if getattr(target_config, key, None) is not None:
            cfg[key] = getattr(target_config, key)
    return cfg


def config_from_dict(settings: dict):
    """The LlamaConfig view of a head's config.json (one layer, the head's attention shape): what caches need."""
    from transformers import LlamaConfig

    skip = ("architectures", "model_type", "torch_dtype", "num_hidden_layers")
    return LlamaConfig(num_hidden_layers=1, **{k: v for k, v in settings.items() if k not in skip})


def new_eagle3_head(
    target_config, *, layers: Sequence[int], draft_vocab_size: int, intermediate_size: int | None = None
) -> Eagle3HeadModule:
    """A freshly initialised head sized for a target LlamaConfig."""
    cfg = eagle3_config_dict(
        target_config, layers=layers, draft_vocab_size=draft_vocab_size, intermediate_size=intermediate_size
    )
    return Eagle3HeadModule(cfg, num_captured=len(layers))


def recorded_layers(settings: dict) -> tuple[int, ...] | None:
    """The target layers recorded in a config.json dict (eagle_config.eagle_aux_hidden_state_layer_ids), if any."""
    eagle_config = settings.get("eagle_config") or {}
    ids = eagle_config.get("eagle_aux_hidden_state_layer_ids") if isinstance(eagle_config, dict) else None
    return tuple(int(i) for i in ids) if ids else None


def save_eagle3_head(head: Eagle3HeadModule, folder: str | Path, dtype: torch.dtype = torch.float16) -> Path:
    """Write `config.json` + `model.safetensors` (the layout above) into `folder`."""
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    state = {}
    for key, value in head.state_dict().items():
        value = value.detach()
        state[key] = (value if key in ("d2t", "t2d") else value.to(dtype)).contiguous().clone()
    save_file(state, str(folder / WEIGHTS_FILE), metadata={"format": "pt"})
    write_json(folder / "config.json", {**head.settings, "torch_dtype": str(dtype).removeprefix("torch.")})
    return folder


def expected_shapes(settings: dict, num_captured: int) -> dict[str, tuple[int, ...]]:
    """Every tensor of a single-layer head and its shape, as TensorRT-LLM's `Eagle3ForCausalLM` loads it."""
    config = _view(settings)
    hidden, heads, kv = config.hidden_size, config.num_attention_heads, config.num_key_value_heads
    head_dim = hidden // heads
    target_hidden = config.target_hidden_size or hidden
    inter, vocab, draft_vocab = config.intermediate_size, config.vocab_size, config.draft_vocab_size
    shapes = {
        "midlayer.input_layernorm.weight": (hidden,),
        "midlayer.hidden_norm.weight": (hidden,),
        "midlayer.self_attn.q_proj.weight": (heads * head_dim, 2 * hidden),
        "midlayer.self_attn.k_proj.weight": (kv * head_dim, 2 * hidden),
        "midlayer.self_attn.v_proj.weight": (kv * head_dim, 2 * hidden),
        "midlayer.self_attn.o_proj.weight": (hidden, heads * head_dim),
        "midlayer.post_attention_layernorm.weight": (hidden,),
        "midlayer.mlp.gate_proj.weight": (inter, hidden),
        "midlayer.mlp.up_proj.weight": (inter, hidden),
        "midlayer.mlp.down_proj.weight": (hidden, inter),
        "norm.weight": (hidden,),
        "lm_head.weight": (draft_vocab, hidden),
        "d2t": (draft_vocab,),
        "t2d": (vocab,),
    }
    if num_captured > 1:
        shapes["fc.weight"] = (hidden, num_captured * target_hidden)
    return shapes


def _trtllm_names(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The tensor names TensorRT-LLM's Eagle3 loader uses: a single layer exported as `layers.0.*` (NVIDIA
    Model-Optimizer's EagleExporter, modelopt/torch/export/plugins/hf_spec_export.py of nvidia-modelopt 0.47.0) is
    its `midlayer.*` (`Eagle3ForCausalLM.load_weights` renames it; trtllm-llmapi-path.md 6.3)."""
    if not any(k.startswith("layers.0.") for k in state) or any(k.startswith("midlayer.") for k in state):
        return state
    return {("midlayer." + k[len("layers.0.") :] if k.startswith("layers.0.") else k): v for k, v in state.items()}


def _read_weights(folder: Path) -> tuple[dict[str, torch.Tensor], Path]:
    path = folder / WEIGHTS_FILE
    if path.is_file():
        from safetensors.torch import load_file

        return _trtllm_names(load_file(str(path))), path
    legacy = folder / LEGACY_WEIGHTS_FILE
    if legacy.is_file():
        return _trtllm_names(torch.load(legacy, map_location="cpu", weights_only=True)), legacy
    raise UserError(
        f"{folder}: no {WEIGHTS_FILE} (or {LEGACY_WEIGHTS_FILE}); an EAGLE-3 head folder holds "
        "config.json and its weights (the folder TensorRT-LLM's speculative_model points to)."
    )


def _check_config(config: dict, path: Path) -> None:
    for key in ("hidden_size", "intermediate_size", "num_attention_heads", "vocab_size", "rms_norm_eps"):
        require_key(config, key, path)
    if int(config.get("num_hidden_layers", 1)) != 1:
        raise UserError(
            f"{path}: num_hidden_layers={config['num_hidden_layers']}; the reference runtime runs "
            "single-layer EAGLE-3 heads only (num_hidden_layers 1)"
        )
    if config.get("kv_lora_rank"):
        raise UserError(
            f"{path}: kv_lora_rank is set (an MLA draft); the reference runtime runs Llama-style EAGLE-3 heads only"
        )
    target_hidden = config.get("target_hidden_size")
    if target_hidden is not None and int(target_hidden) != int(config["hidden_size"]):
        raise UserError(
            f"{path}: target_hidden_size={target_hidden} differs from hidden_size={config['hidden_size']}"
            "; heads with their own embedding are not supported by the reference runtime"
        )
    eagle_config = config.get("eagle_config") or {}
    for key, default in _ARCH_SWITCHES.items():
        if bool(eagle_config.get(key, default)) != default:
            raise UserError(
                f"{path}: eagle_config.{key}={eagle_config[key]!r} is not supported by the reference "
                f"runtime (only {default})"
            )


def load_eagle3_head(folder: str | Path, target_model=None, dtype: torch.dtype = torch.float32) -> Eagle3HeadModule:
    """Load an EAGLE-3 head folder into an `Eagle3HeadModule` of `dtype`, in eval mode.

    Every tensor is checked against config.json (names and shapes as TensorRT-LLM loads them); when
    `target_model` (a transformers causal LM) is given, the head's width and vocabulary are checked against it.
    A head without lm_head.weight takes the target's (TensorRT-LLM `load_lm_head_from_target`; needs V_d = V)."""
    folder = Path(folder)
    config = read_config(folder, "EAGLE-3 head")
    config_path = folder / "config.json"
    _check_config(config, config_path)
    state, weights = _read_weights(folder)
    settings = {k: v for k, v in config.items() if k != "torch_dtype"}
    view = _view(settings)
    vocab, draft_vocab = view.vocab_size, view.draft_vocab_size
    if target_model is not None:
        tcfg = target_model.config
        for key in ("hidden_size", "vocab_size"):
            if getattr(view, key) != getattr(tcfg, key):
                raise UserError(
                    f"{config_path}: {key}={getattr(view, key)} does not match the target's "
                    f"{key}={getattr(tcfg, key)}; use the EAGLE-3 head trained for this target."
                )
        if "lm_head.weight" not in state and draft_vocab == vocab:
            state["lm_head.weight"] = target_model.get_output_embeddings().weight.detach().clone()
    if "d2t" not in state:
        if draft_vocab != vocab:
            raise UserError(
                f"{weights}: no 'd2t' tensor although draft_vocab_size={draft_vocab} differs from "
                f"vocab_size={vocab}; the draft-to-target id mapping is required."
            )
        state["d2t"] = torch.zeros(draft_vocab, dtype=torch.long)
    if "t2d" not in state:  # TensorRT-LLM does not read it; rebuilt from d2t
        state["t2d"] = torch.zeros(vocab, dtype=torch.bool)
        state["t2d"][torch.arange(draft_vocab) + state["d2t"].long()] = True
    if "fc.weight" in state:
        width = view.target_hidden_size or view.hidden_size
        in_features = state["fc.weight"].shape[-1]
        if in_features % width:
            raise UserError(
                f"{weights}: fc.weight has {in_features} inputs, not a multiple of the target width {width}"
            )
        num_captured = in_features // width
    else:
        num_captured = 1
    layers = recorded_layers(settings)
    if layers is not None and len(layers) != num_captured:
        raise UserError(
            f"{config_path}: eagle_config.eagle_aux_hidden_state_layer_ids lists {len(layers)} layers "
            f"but fc.weight fuses {num_captured}; fix config.json or the weights."
        )
    expected = expected_shapes(settings, num_captured)
    missing = [k for k in expected if k not in state]
    unexpected = [k for k in state if k not in expected]
    wrong = [
        f"{k} {tuple(state[k].shape)} (expected {expected[k]})"
        for k in expected
        if k in state and tuple(state[k].shape) != expected[k]
    ]
    if missing or unexpected or wrong:
        raise UserError(
            f"{weights}: tensors do not match {config_path.name} (missing {missing[:4]}, unexpected "
            f"{unexpected[:4]}, wrong shape {wrong[:3]}); fix config.json or the weights."
        )
    d2t = state["d2t"].long()
    targets = torch.arange(draft_vocab) + d2t
    if bool((targets < 0).any()) or bool((targets >= vocab).any()) or targets.unique().numel() != draft_vocab:
        raise UserError(
            f"{weights}: d2t maps draft ids outside 0..{vocab - 1} or two draft ids to one target id; "
            "d2t[i] must be (target id of draft token i) - i."
        )
    head = Eagle3HeadModule(settings, num_captured)
    head.load_state_dict({**state, "d2t": d2t, "t2d": state["t2d"].bool()})
    head = head.to(dtype).eval()
    return head
