"""Shape-real copies of public checkpoints: the real config.json / generation_config.json / tokenizer files, the
real tensor names, dtypes and shapes, the real file names and shard indexes, and sparse data (formats.py: no real
bytes on disk; a whole set takes a few MB and about a second to write).

Facts (each checkpoint's published files on the Hugging Face hub, and the other sources named below):

- `llama31_8b_instruct` — meta-llama/Llama-3.1-8B-Instruct: config.json as published (32 layers, hidden 4096,
  32 heads / 8 KV heads, intermediate 14336, vocab 128256, rope_scaling llama3 factor 8, 131072 positions,
  bfloat16, untied), generation_config eos [128001, 128008, 128009]; 4 safetensors shards and
  `model.safetensors.index.json` (291 tensors, total_size 16060522496). The shard of each tensor follows
  transformers' save_pretrained (tensors in module order, a new shard when the next would pass 5 GB), which gives
  the published map: layer 20 split after mlp.gate_proj, layer 31 after mlp.up_proj (the map zml/zml embeds in
  `mlir/main.zig`). Tokenizer: tokenizers_standin.py, with the published chat template
  (templates/llama-3.1-instruct.jinja, the template text of tokenizer_config.json).
- `llama32_1b_instruct` — meta-llama/Llama-3.2-1B-Instruct: 16 layers, hidden 2048, head_dim 64, 32 / 8 heads,
  intermediate 8192, rope llama3 factor 32, tied embeddings (no lm_head.weight): one model.safetensors of 146
  tensors; the same tokenizer, its chat template with strftime_now.
- `eagle3_llama31_8b` — yuhuili/EAGLE3-LLaMA3.1-Instruct-8B: config.json of SafeAILab/EAGLE
  `eagle/traineagle3/config.json` (architectures as published: LlamaForCausalLMEagle3; draft_vocab_size 32000,
  max_position_embeddings 2048, float16); `pytorch_model.bin` with the tensors of `eagle/traineagle3/cnets.py`:
  fc [4096, 12288] (3 captured layers x hidden), midlayer.* with q/k/v over 2 x hidden, norm, lm_head
  [32000, 4096], d2t int64 [32000], t2d bool [128256]; no embed_tokens (the trainer saves no frozen parameter).
- `vicuna_7b` — lmsys/vicuna-7b-v1.3: LlamaForCausalLM, 32 layers, hidden 4096, 32 heads (no GQA), intermediate
  11008, vocab 32000, 2048 positions, float16; `pytorch_model-0000{1,2}-of-00002.bin` + `pytorch_model.bin.index.json`
  with the `rotary_emb.inv_freq` buffers old transformers saved; SentencePiece tokenizer.model only, no chat
  template.
- `medusa_vicuna_7b` — FasterDecoding/medusa-vicuna-7b-v1.3 as published: config.json says medusa_num_heads 2,
  `medusa_lm_head.pt` holds 5 heads ({i}.0.linear.weight/bias, {i}.1.weight [32000, 4096], float16;
  FasterDecoding/Medusa `medusa/model/medusa_model.py`).
- `eagle1_vicuna_7b` — yuhuili/EAGLE-Vicuna-7B-v1.3: SafeAILab/EAGLE `train/vicuna_7B_config.json` (1 layer);
  `pytorch_model.bin` with embed_tokens, fc [4096, 8192] + bias, layers.0.* without input_layernorm
  (`eagle/model/cnets1.py`).
- `deepseek_r1` — deepseek-ai/DeepSeek-R1: DeepseekV3ForCausalLM config (61 layers, num_nextn_predict_layers 1,
  MLA, 256 routed experts from layer 3, FP8 e4m3 weights with float32 weight_scale_inv per 128 x 128 block);
  91,991 tensors with the MTP module as layer 61 (embed_tokens, enorm, hnorm, eh_proj [7168, 14336],
  shared_head.norm, shared_head.head, and a full MoE decoder layer; deepseek-ai/DeepSeek-V3 `README_WEIGHTS.md`,
  `inference/convert.py`). SCALED DOWN: 8 shards instead of 163, named with the real six-digit total
  (`model-00001-of-000008.safetensors`), layers split evenly in order, the layer-61 MTP module alone in the last
  shard as in the published `model-00163-of-000163.safetensors`. Tokenizer: a stand-in without the chat template.
- `hub_cache` — the huggingface_hub cache layout: `models--org--name/{refs/main, snapshots/<commit>/, blobs/}`,
  each snapshot file a relative symlink `../../blobs/<sha256 or sha1>` (huggingface_hub `file_download.py`).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from real_checkpoints.formats import Tensor, total_bytes, write_index, write_safetensors, write_torch_zip
from real_checkpoints.tokenizers_standin import write_deepseek_tokenizer, write_llama2_tokenizer, write_llama3_tokenizer

TEMPLATES = Path(__file__).parent / "templates"
SHARD_LIMIT = 5_000_000_000  # transformers save_pretrained max_shard_size "5GB"

LLAMA31_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 128000,
    "eos_token_id": [128001, 128008, 128009],
    "hidden_act": "silu",
    "hidden_size": 4096,
    "initializer_range": 0.02,
    "intermediate_size": 14336,
    "max_position_embeddings": 131072,
    "mlp_bias": False,
    "model_type": "llama",
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "pretraining_tp": 1,
    "rms_norm_eps": 1e-05,
    "rope_scaling": {
        "factor": 8.0,
        "high_freq_factor": 4.0,
        "low_freq_factor": 1.0,
        "original_max_position_embeddings": 8192,
        "rope_type": "llama3",
    },
    "rope_theta": 500000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.42.3",
    "use_cache": True,
    "vocab_size": 128256,
}
LLAMA32_1B_CONFIG = {
    **LLAMA31_CONFIG,
    "head_dim": 64,
    "hidden_size": 2048,
    "intermediate_size": 8192,
    "num_hidden_layers": 16,
    "rope_scaling": {
        "factor": 32.0,
        "high_freq_factor": 4.0,
        "low_freq_factor": 1.0,
        "original_max_position_embeddings": 8192,
        "rope_type": "llama3",
    },
    "tie_word_embeddings": True,
    "transformers_version": "4.45.0.dev0",
}
LLAMA3_GENERATION = {
    "bos_token_id": 128000,
    "do_sample": True,
    "eos_token_id": [128001, 128008, 128009],
    "temperature": 0.6,
    "top_p": 0.9,
    "transformers_version": "4.42.3",
}
EAGLE3_CONFIG = {  # SafeAILab/EAGLE eagle/traineagle3/config.json, architectures as the published head's
    "architectures": ["LlamaForCausalLMEagle3"],
    "bos_token_id": 128000,
    "eos_token_id": 128001,
    "hidden_act": "silu",
    "hidden_size": 4096,
    "initializer_range": 0.02,
    "intermediate_size": 14336,
    "max_position_embeddings": 2048,
    "model_type": "llama",
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "num_hidden_layers": 1,
    "pad_token_id": 0,
    "rms_norm_eps": 1e-05,
    "tie_word_embeddings": False,
    "torch_dtype": "float16",
    "transformers_version": "4.28.1",
    "use_cache": True,
    "vocab_size": 128256,
    "draft_vocab_size": 32000,
}
VICUNA_CONFIG = {  # lmsys/vicuna-7b-v1.3 (SafeAILab/EAGLE train/vicuna_7B_config.json with 32 layers)
    "_name_or_path": "lmsys/vicuna-7b-v1.3",
    "architectures": ["LlamaForCausalLM"],
    "bos_token_id": 1,
    "eos_token_id": 2,
    "hidden_act": "silu",
    "hidden_size": 4096,
    "initializer_range": 0.02,
    "intermediate_size": 11008,
    "max_position_embeddings": 2048,
    "model_type": "llama",
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "pad_token_id": 0,
    "rms_norm_eps": 1e-06,
    "tie_word_embeddings": False,
    "torch_dtype": "float16",
    "transformers_version": "4.28.1",
    "use_cache": True,
    "vocab_size": 32000,
}
EAGLE1_VICUNA_CONFIG = {**VICUNA_CONFIG, "num_hidden_layers": 1}
EAGLE1_VICUNA_CONFIG.pop("_name_or_path")
MEDUSA_VICUNA_CONFIG = {
    "base_model_name_or_path": "lmsys/vicuna-7b-v1.3",
    "medusa_num_heads": 2,
    "medusa_num_layers": 1,
}
MEDUSA_HEADS_IN_FILE = 5
DEEPSEEK_R1_CONFIG = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "auto_map": {
        "AutoConfig": "configuration_deepseek.DeepseekV3Config",
        "AutoModel": "modeling_deepseek.DeepseekV3Model",
        "AutoModelForCausalLM": "modeling_deepseek.DeepseekV3ForCausalLM",
    },
    "aux_loss_alpha": 0.001,
    "bos_token_id": 0,
    "eos_token_id": 1,
    "ep_size": 1,
    "first_k_dense_replace": 3,
    "hidden_act": "silu",
    "hidden_size": 7168,
    "initializer_range": 0.02,
    "intermediate_size": 18432,
    "kv_lora_rank": 512,
    "max_position_embeddings": 163840,
    "model_type": "deepseek_v3",
    "moe_intermediate_size": 2048,
    "moe_layer_freq": 1,
    "n_group": 8,
    "n_routed_experts": 256,
    "n_shared_experts": 1,
    "norm_topk_prob": True,
    "num_attention_heads": 128,
    "num_experts_per_tok": 8,
    "num_hidden_layers": 61,
    "num_key_value_heads": 128,
    "num_nextn_predict_layers": 1,
    "q_lora_rank": 1536,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "quantization_config": {
        "activation_scheme": "dynamic",
        "fmt": "e4m3",
        "quant_method": "fp8",
        "weight_block_size": [128, 128],
    },
    "rms_norm_eps": 1e-06,
    "rope_scaling": {
        "beta_fast": 32,
        "beta_slow": 1,
        "factor": 40,
        "mscale": 1.0,
        "mscale_all_dim": 1.0,
        "original_max_position_embeddings": 4096,
        "type": "yarn",
    },
    "rope_theta": 10000,
    "routed_scaling_factor": 2.5,
    "scoring_func": "sigmoid",
    "seq_aux": True,
    "tie_word_embeddings": False,
    "topk_group": 4,
    "topk_method": "noaux_tc",
    "torch_dtype": "bfloat16",
    "transformers_version": "4.46.3",
    "use_cache": True,
    "v_head_dim": 128,
    "vocab_size": 129280,
}
DEEPSEEK_SHARDS = 8  # scaled down from 163


def _json(path: Path, data) -> None:
    path.write_text(json.dumps(data, indent=2) + "\n")


def llama_tensors(cfg: dict, dtype: str, *, inv_freq: bool = False) -> list[Tensor]:
    """A LlamaForCausalLM state dict in module order (embed, layers, norm, lm_head unless tied)."""
    h, inter, layers = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"]
    head_dim = cfg.get("head_dim", h // cfg["num_attention_heads"])
    q, kv = cfg["num_attention_heads"] * head_dim, cfg.get("num_key_value_heads", cfg["num_attention_heads"]) * head_dim
    out = [Tensor("model.embed_tokens.weight", dtype, (cfg["vocab_size"], h))]
    for i in range(layers):
        p = f"model.layers.{i}."
        out += [
            Tensor(p + "self_attn.q_proj.weight", dtype, (q, h)),
            Tensor(p + "self_attn.k_proj.weight", dtype, (kv, h)),
            Tensor(p + "self_attn.v_proj.weight", dtype, (kv, h)),
            Tensor(p + "self_attn.o_proj.weight", dtype, (h, q)),
        ]
        if inv_freq:
            out.append(Tensor(p + "self_attn.rotary_emb.inv_freq", "float32", (head_dim // 2,)))
        out += [
            Tensor(p + "mlp.gate_proj.weight", dtype, (inter, h)),
            Tensor(p + "mlp.up_proj.weight", dtype, (inter, h)),
            Tensor(p + "mlp.down_proj.weight", dtype, (h, inter)),
            Tensor(p + "input_layernorm.weight", dtype, (h,)),
            Tensor(p + "post_attention_layernorm.weight", dtype, (h,)),
        ]
    out.append(Tensor("model.norm.weight", dtype, (h,)))
    if not cfg.get("tie_word_embeddings"):
        out.append(Tensor("lm_head.weight", dtype, (cfg["vocab_size"], h)))
    return out


def shard(tensors: list[Tensor], limit: int = SHARD_LIMIT) -> list[list[Tensor]]:
    """transformers' save_pretrained sharding: in order, a new shard when the next tensor would pass the limit."""
    shards: list[list[Tensor]] = [[]]
    size = 0
    for t in tensors:
        if shards[-1] and size + t.nbytes > limit:
            shards.append([])
            size = 0
        shards[-1].append(t)
        size += t.nbytes
    return shards


def write_sharded_safetensors(folder: Path, shards: list[list[Tensor]], width: int = 5) -> dict[str, str]:
    weight_map = {}
    for i, part in enumerate(shards, 1):
        name = f"model-{i:05d}-of-{len(shards):0{width}d}.safetensors"
        write_safetensors(folder / name, part, {"format": "pt"})
        weight_map.update({t.name: name for t in part})
    write_index(folder / "model.safetensors.index.json", weight_map, sum(total_bytes(p) for p in shards))
    return weight_map


def llama31_8b_instruct(folder: Path) -> Path:
    folder.mkdir(parents=True)
    _json(folder / "config.json", LLAMA31_CONFIG)
    _json(folder / "generation_config.json", LLAMA3_GENERATION)
    write_sharded_safetensors(folder, shard(llama_tensors(LLAMA31_CONFIG, "bfloat16")))
    write_llama3_tokenizer(folder, (TEMPLATES / "llama-3.1-instruct.jinja").read_text())
    return folder


def llama32_1b_instruct(folder: Path) -> Path:
    folder.mkdir(parents=True)
    _json(folder / "config.json", LLAMA32_1B_CONFIG)
    _json(folder / "generation_config.json", {**LLAMA3_GENERATION, "transformers_version": "4.45.0.dev0"})
    write_safetensors(folder / "model.safetensors", llama_tensors(LLAMA32_1B_CONFIG, "bfloat16"), {"format": "pt"})
    write_llama3_tokenizer(folder, (TEMPLATES / "llama-3.2-instruct.jinja").read_text())
    return folder


def eagle3_tensors(cfg: dict) -> list[Tensor]:
    h, inter, dt = cfg["hidden_size"], cfg["intermediate_size"], cfg["torch_dtype"]
    heads, kv_heads = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    head_dim = h // heads
    m = "midlayer."
    return [
        Tensor("fc.weight", dt, (h, 3 * h)),
        Tensor(m + "hidden_norm.weight", dt, (h,)),
        Tensor(m + "input_layernorm.weight", dt, (h,)),
        Tensor(m + "post_attention_layernorm.weight", dt, (h,)),
        Tensor(m + "self_attn.q_proj.weight", dt, (heads * head_dim, 2 * h)),
        Tensor(m + "self_attn.k_proj.weight", dt, (kv_heads * head_dim, 2 * h)),
        Tensor(m + "self_attn.v_proj.weight", dt, (kv_heads * head_dim, 2 * h)),
        Tensor(m + "self_attn.o_proj.weight", dt, (h, heads * head_dim)),
        Tensor(m + "mlp.gate_proj.weight", dt, (inter, h)),
        Tensor(m + "mlp.up_proj.weight", dt, (inter, h)),
        Tensor(m + "mlp.down_proj.weight", dt, (h, inter)),
        Tensor("norm.weight", dt, (h,)),
        Tensor("lm_head.weight", dt, (cfg["draft_vocab_size"], h)),
        Tensor("d2t", "int64", (cfg["draft_vocab_size"],)),
        Tensor("t2d", "bool", (cfg["vocab_size"],)),
    ]


def eagle3_llama31_8b(folder: Path) -> Path:
    folder.mkdir(parents=True)
    _json(folder / "config.json", EAGLE3_CONFIG)
    write_torch_zip(folder / "pytorch_model.bin", eagle3_tensors(EAGLE3_CONFIG), archive="archive")
    return folder


def speculators_eagle3_config(
    verifier: str = "meta-llama/Llama-3.1-8B-Instruct", architectures: tuple[str, ...] = ("LlamaForCausalLM",)
) -> dict:
    """The config.json vllm-project/speculators writes when it converts the EAGLE-3 head above for its verifier
    (`src/speculators/convert/eagle/eagle3_converter.py`: Eagle3SpeculatorConfig of `models/eagle3/config.py` with
    the draft layer as a LlamaConfig diff in transformer_layer_config, vocab_size from t2d, max_position_embeddings
    raised to the verifier's, rope_theta 10000 (the LlamaConfig default, so not written); speculators_config of
    `config.py` with a greedy proposal of 5 tokens and the verifier's name_or_path and architectures)."""
    layer = {
        "model_type": "llama",
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_hidden_layers": 1,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "max_position_embeddings": 131072,
        "rms_norm_eps": 1e-05,
        "vocab_size": 128256,
        "tie_word_embeddings": False,
    }
    return {
        "architectures": ["Eagle3Speculator"],
        "speculators_model_type": "eagle3",
        "speculators_version": "0.2.0",
        "draft_vocab_size": 32000,
        "norm_before_residual": False,
        "target_hidden_size": None,
        "eagle_aux_hidden_state_layer_ids": None,
        "transformer_layer_config": layer,
        "speculators_config": {
            "algorithm": "eagle3",
            "default_proposal_method": "greedy",
            "proposal_methods": [
                {"proposal_type": "greedy", "speculative_tokens": 5, "accept_tolerance": 0.0, "verifier_accept_k": 1}
            ],
            "verifier": {"name_or_path": verifier, "architectures": list(architectures)},
        },
    }


def speculators_eagle3(folder: Path, config: dict | None = None) -> Path:
    """yuhuili/EAGLE3-LLaMA3.1-Instruct-8B converted by speculators: midlayer.* renamed layers.0.*, the verifier's
    embed_tokens [128256, 4096] added (the EAGLE trainer saved none), one model.safetensors (save_pretrained). The
    tensors' dtype after conversion is not documented: float16 here, and the config writes none."""
    folder.mkdir(parents=True)
    _json(folder / "config.json", config or speculators_eagle3_config())
    tensors = [
        Tensor(t.name.replace("midlayer.", "layers.0."), t.dtype, t.shape) for t in eagle3_tensors(EAGLE3_CONFIG)
    ]
    tensors.append(
        Tensor("embed_tokens.weight", "float16", (EAGLE3_CONFIG["vocab_size"], EAGLE3_CONFIG["hidden_size"]))
    )
    write_safetensors(folder / "model.safetensors", tensors, {"format": "pt"})
    return folder


def vicuna_7b(folder: Path) -> Path:
    folder.mkdir(parents=True)
    _json(folder / "config.json", VICUNA_CONFIG)
    _json(
        folder / "generation_config.json",
        {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0, "transformers_version": "4.28.1"},
    )
    tensors = llama_tensors(VICUNA_CONFIG, "float16", inv_freq=True)
    parts = shard(tensors, limit=10_000_000_000)  # save_pretrained's max_shard_size "10GB" of its day: 2 files
    weight_map = {}
    for i, part in enumerate(parts, 1):
        name = f"pytorch_model-{i:05d}-of-{len(parts):05d}.bin"
        write_torch_zip(folder / name, part, archive="archive")
        weight_map.update({t.name: name for t in part})
    write_index(folder / "pytorch_model.bin.index.json", weight_map, total_bytes(tensors))
    write_llama2_tokenizer(folder)
    return folder


def medusa_vicuna_7b(folder: Path) -> Path:
    folder.mkdir(parents=True)
    _json(folder / "config.json", MEDUSA_VICUNA_CONFIG)
    h, v = VICUNA_CONFIG["hidden_size"], VICUNA_CONFIG["vocab_size"]
    tensors = []
    for i in range(MEDUSA_HEADS_IN_FILE):
        tensors += [
            Tensor(f"{i}.0.linear.weight", "float16", (h, h)),
            Tensor(f"{i}.0.linear.bias", "float16", (h,)),
            Tensor(f"{i}.1.weight", "float16", (v, h)),
        ]
    write_torch_zip(folder / "medusa_lm_head.pt", tensors, archive="archive")
    return folder


def eagle1_vicuna_7b(folder: Path) -> Path:
    folder.mkdir(parents=True)
    _json(folder / "config.json", EAGLE1_VICUNA_CONFIG)
    cfg, dt = EAGLE1_VICUNA_CONFIG, "float16"
    h, inter = cfg["hidden_size"], cfg["intermediate_size"]
    p = "layers.0."
    tensors = [
        Tensor("embed_tokens.weight", dt, (cfg["vocab_size"], h)),
        Tensor("fc.weight", dt, (h, 2 * h)),
        Tensor("fc.bias", dt, (h,)),
    ]
    tensors += [Tensor(p + f"self_attn.{x}_proj.weight", dt, (h, h)) for x in "qkvo"]
    tensors += [
        Tensor(p + "self_attn.rotary_emb.inv_freq", "float32", (h // cfg["num_attention_heads"] // 2,)),
        Tensor(p + "mlp.gate_proj.weight", dt, (inter, h)),
        Tensor(p + "mlp.up_proj.weight", dt, (inter, h)),
        Tensor(p + "mlp.down_proj.weight", dt, (h, inter)),
        Tensor(p + "post_attention_layernorm.weight", dt, (h,)),
    ]
    write_torch_zip(folder / "pytorch_model.bin", tensors, archive="archive")
    return folder


def deepseek_tensors(cfg: dict) -> list[Tensor]:
    """DeepSeek-V3/R1 in its FP8 release: 91,991 tensors (layer 61 is the MTP module)."""
    h, v = cfg["hidden_size"], cfg["vocab_size"]
    heads, nope, rope, vdim = (
        cfg["num_attention_heads"],
        cfg["qk_nope_head_dim"],
        cfg["qk_rope_head_dim"],
        cfg["v_head_dim"],
    )
    qr, kvr, moe, dense = (
        cfg["q_lora_rank"],
        cfg["kv_lora_rank"],
        cfg["moe_intermediate_size"],
        cfg["intermediate_size"],
    )

    def fp8(name: str, rows: int, cols: int) -> list[Tensor]:
        return [
            Tensor(name + ".weight", "float8_e4m3fn", (rows, cols)),
            Tensor(name + ".weight_scale_inv", "float32", (-(-rows // 128), -(-cols // 128))),
        ]

    def mlp(p: str, inter: int) -> list[Tensor]:
        return fp8(p + "gate_proj", inter, h) + fp8(p + "up_proj", inter, h) + fp8(p + "down_proj", h, inter)

    def layer(i: int) -> list[Tensor]:
        p = f"model.layers.{i}."
        out = [Tensor(p + "input_layernorm.weight", "bfloat16", (h,))]
        out += fp8(p + "self_attn.q_a_proj", qr, h) + [Tensor(p + "self_attn.q_a_layernorm.weight", "bfloat16", (qr,))]
        out += fp8(p + "self_attn.q_b_proj", heads * (nope + rope), qr)
        out += fp8(p + "self_attn.kv_a_proj_with_mqa", kvr + rope, h)
        out += [Tensor(p + "self_attn.kv_a_layernorm.weight", "bfloat16", (kvr,))]
        out += fp8(p + "self_attn.kv_b_proj", heads * (nope + vdim), kvr) + fp8(p + "self_attn.o_proj", h, heads * vdim)
        out += [Tensor(p + "post_attention_layernorm.weight", "bfloat16", (h,))]
        if i < cfg["first_k_dense_replace"]:
            return out + mlp(p + "mlp.", dense)
        out += [
            Tensor(p + "mlp.gate.weight", "bfloat16", (cfg["n_routed_experts"], h)),
            Tensor(p + "mlp.gate.e_score_correction_bias", "float32", (cfg["n_routed_experts"],)),
        ]
        for e in range(cfg["n_routed_experts"]):
            out += mlp(p + f"mlp.experts.{e}.", moe)
        return out + mlp(p + "mlp.shared_experts.", moe * cfg["n_shared_experts"])

    out = [Tensor("model.embed_tokens.weight", "bfloat16", (v, h))]
    for i in range(cfg["num_hidden_layers"]):
        out += layer(i)
    out += [Tensor("model.norm.weight", "bfloat16", (h,)), Tensor("lm_head.weight", "bfloat16", (v, h))]
    n = cfg["num_hidden_layers"]  # the MTP module (README_WEIGHTS.md): its own embedding, norms, projection, head
    p = f"model.layers.{n}."
    out += [
        Tensor(p + "embed_tokens.weight", "bfloat16", (v, h)),
        Tensor(p + "enorm.weight", "bfloat16", (h,)),
        Tensor(p + "hnorm.weight", "bfloat16", (h,)),
        Tensor(p + "eh_proj.weight", "bfloat16", (h, 2 * h)),
        Tensor(p + "shared_head.norm.weight", "bfloat16", (h,)),
        Tensor(p + "shared_head.head.weight", "bfloat16", (v, h)),
    ] + layer(n)
    return out


def deepseek_r1(folder: Path, shards: int = DEEPSEEK_SHARDS) -> Path:
    folder.mkdir(parents=True)
    _json(folder / "config.json", DEEPSEEK_R1_CONFIG)
    _json(
        folder / "generation_config.json",
        {
            "bos_token_id": 0,
            "eos_token_id": 1,
            "do_sample": True,
            "temperature": 0.6,
            "top_p": 0.95,
            "transformers_version": "4.46.3",
        },
    )
    tensors = deepseek_tensors(DEEPSEEK_R1_CONFIG)
    mtp_prefix = f"model.layers.{DEEPSEEK_R1_CONFIG['num_hidden_layers']}."
    main = [t for t in tensors if not t.name.startswith(mtp_prefix)]
    mtp = [t for t in tensors if t.name.startswith(mtp_prefix)]
    per = -(-len(main) // (shards - 1))
    parts = [main[i : i + per] for i in range(0, len(main), per)] + [mtp]
    write_sharded_safetensors(folder, parts, width=6)
    write_deepseek_tokenizer(folder)
    return folder


def hub_cache(cache: Path, repo_id: str, source: Path, commit: str, refs: tuple[str, ...] = ("main",)) -> Path:
    """Put `source`'s files into a hub cache as huggingface_hub lays it out; returns the snapshot folder. Large
    files are named by their sha256 in blobs/ (as LFS files are), the rest by their git blob sha1."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    blobs, snapshot = repo / "blobs", repo / "snapshots" / commit
    blobs.mkdir(parents=True, exist_ok=True)
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir(exist_ok=True)
    for ref in refs:
        (repo / "refs" / ref).write_text(commit)
    for path in sorted(source.iterdir()):
        if path.stat().st_size > 10_000_000:  # LFS: sha256 of the content (a hole: name it by path and size)
            key = hashlib.sha256(f"{repo_id}/{path.name}:{path.stat().st_size}".encode()).hexdigest()
        else:
            data = path.read_bytes()
            key = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
        blob = blobs / key
        if not blob.exists():
            shutil.copyfile(path, blob) if path.stat().st_size <= 10_000_000 else _sparse_copy(path, blob)
        os.symlink(os.path.join("..", "..", "blobs", key), snapshot / path.name)
    return snapshot


def _sparse_copy(src: Path, dst: Path) -> None:
    """A copy that keeps the holes: only the data segments are copied (lseek SEEK_DATA / SEEK_HOLE)."""
    size = src.stat().st_size
    with open(src, "rb") as f, open(dst, "wb") as g:
        offset = 0
        while offset < size:
            try:
                start = os.lseek(f.fileno(), offset, os.SEEK_DATA)
            except OSError:  # no data after offset
                break
            end = os.lseek(f.fileno(), start, os.SEEK_HOLE)
            f.seek(start)
            g.seek(start)
            g.write(f.read(end - start))
            offset = end
        g.truncate(size)


@dataclass(frozen=True)
class RealCheckpoints:
    root: Path
    llama31_8b: Path
    llama32_1b: Path
    eagle3: Path
    vicuna: Path
    medusa: Path
    eagle1: Path
    deepseek_r1: Path
    hub: Path  # an HF_HUB_CACHE holding meta-llama/Llama-3.1-8B-Instruct and its EAGLE-3 head
    hub_commit: str


HUB_COMMIT = "0e9e39f249a16976918f6564b8830bc894c89659"
EAGLE3_HUB_COMMIT = "8b1a8b4b5d7c4f02a4e0f0a33f6c2b4a19d2e6f1"


def build_all(root: Path) -> RealCheckpoints:
    root.mkdir(parents=True, exist_ok=True)
    llama = llama31_8b_instruct(root / "Llama-3.1-8B-Instruct")
    eagle3 = eagle3_llama31_8b(root / "EAGLE3-LLaMA3.1-Instruct-8B")
    hub = root / "hf-cache"
    hub_cache(hub, "meta-llama/Llama-3.1-8B-Instruct", llama, HUB_COMMIT)
    hub_cache(hub, "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", eagle3, EAGLE3_HUB_COMMIT)
    return RealCheckpoints(
        root=root,
        llama31_8b=llama,
        llama32_1b=llama32_1b_instruct(root / "Llama-3.2-1B-Instruct"),
        eagle3=eagle3,
        vicuna=vicuna_7b(root / "vicuna-7b-v1.3"),
        medusa=medusa_vicuna_7b(root / "medusa-vicuna-7b-v1.3"),
        eagle1=eagle1_vicuna_7b(root / "EAGLE-Vicuna-7B-v1.3"),
        deepseek_r1=deepseek_r1(root / "DeepSeek-R1"),
        hub=hub,
        hub_commit=HUB_COMMIT,
    )


def copy_checkpoint(src: Path, dst: Path, skip: tuple[str, ...] = ()) -> Path:
    """A copy of a fixture folder (holes kept), without the files named in `skip` (for a test to write its own)."""
    dst.mkdir(parents=True)
    for path in sorted(src.iterdir()):
        if path.name not in skip:
            _sparse_copy(path, dst / path.name)
    return dst
