"""The MTP target: a DeepseekV3ForCausalLM with multi-token-prediction layers, trained from scratch on the corpus.

DeepSeek-V3's architecture at tiny size (multi-head latent attention, interleaved RoPE, dense SwiGLU MLPs only: the
`first_k_dense_replace` of config.json covers every decoder layer and the MTP layers, so neither transformers nor
TensorRT-LLM builds an MoE layer) with `num_nextn_predict_layers` MTP modules (`specbuild.heads.mtp`), saved in
DeepSeek-V3's on-disk layout. Trained with DeepSeek-V3's objective (arXiv 2412.19437 §2.2, "Multi-Token
Prediction"): the main model's next-token cross-entropy plus lambda/D times the MTP modules' losses, module k
(1-based) reading the previous depth's hidden state at position i and the embedding of token i+k and predicting
token i+k+1; the embedding and output head are shared, and the MTP loss trains the main model too.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from specbuild.heads.mtp import MtpLayer, load_mtp_layers
from specbuild.zoo import data, evaluate, teacher, train
from specbuild.zoo import target as target_mod
from specbuild.zoo.precision import autocast
from specbuild.zoo.profiles import MtpTargetSettings, Profile

ARCHITECTURE = "DeepseekV3ForCausalLM"


def mtp_config(settings: MtpTargetSettings, profile: Profile, tokenizer):
    """The DeepseekV3Config of the MTP target (dense MLPs everywhere, MLA at tiny sizes, default RoPE)."""
    from transformers import DeepseekV3Config

    shape = settings.shape
    config = DeepseekV3Config(
        vocab_size=profile.vocab_size,
        hidden_size=shape.hidden,
        intermediate_size=shape.intermediate,
        num_hidden_layers=shape.layers,
        num_attention_heads=shape.heads,
        num_key_value_heads=shape.heads,
        q_lora_rank=None,  # queries projected directly (DeepSeek-V2-Lite's choice; V3 uses a rank-1536 LoRA)
        kv_lora_rank=settings.kv_lora_rank,
        qk_nope_head_dim=settings.qk_nope_head_dim,
        qk_rope_head_dim=settings.qk_rope_head_dim,
        v_head_dim=settings.v_head_dim,
        # every decoder layer and MTP layer dense: TensorRT-LLM builds an MoE layer only for layer_idx >=
        # first_k_dense_replace (DeepseekV3DecoderLayer.__init__), the MTP layers being numbered L..L+N-1
        first_k_dense_replace=shape.layers + settings.mtp_layers,
        moe_layer_freq=1,  # read by TensorRT-LLM's rule (DeepSeek-V3's config.json has it)
        # nominal routing settings, never instantiated (no layer is MoE); valid if they were
        n_routed_experts=4,
        num_experts_per_tok=2,
        n_group=1,
        topk_group=1,
        moe_intermediate_size=shape.intermediate // 4,
        n_shared_experts=1,
        num_nextn_predict_layers=settings.mtp_layers,
        max_position_embeddings=profile.max_position_embeddings,
        rms_norm_eps=1e-6,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        rope_interleave=True,
        hidden_act="silu",
        tie_word_embeddings=False,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        initializer_range=0.02,
    )
    config._attn_implementation = "sdpa"
    return config


def new_mtp_target(settings: MtpTargetSettings, profile: Profile, tokenizer, seed: int):
    """(model, MTP layers) initialised from `seed`."""
    from transformers import DeepseekV3ForCausalLM

    torch.manual_seed(seed)
    config = mtp_config(settings, profile, tokenizer)
    model = DeepseekV3ForCausalLM(config)
    layers = torch.nn.ModuleList([MtpLayer(config, k) for k in range(settings.mtp_layers)])
    std = config.initializer_range
    with torch.no_grad():
        for layer in layers:
            layer.eh_proj.weight.normal_(0.0, std)
            for module in layer.block.modules():
                if isinstance(module, torch.nn.Linear):
                    module.weight.normal_(0.0, std)
    return model, layers


def mtp_losses(model, layers, x: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """The main next-token loss and each MTP depth's loss on blocks x [B, S+1] (sdpa attention, causal)."""
    inputs = x[:, :-1]
    width = inputs.shape[1]
    hidden = model.model(input_ids=inputs).last_hidden_state  # after the final norm: what the MTP layers read
    logits = model.lm_head(hidden)
    main = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), x[:, 1:].reshape(-1))
    positions = torch.arange(width)[None]
    cos, sin = model.model.rotary_emb(hidden, positions)
    embed = model.get_input_embeddings()
    depth_losses = []
    h = hidden
    for k, layer in enumerate(layers):  # depth k+1: position i reads h_i and token i+k+1, predicts token i+k+2
        n = width - k - 1
        h = layer(
            h[:, :n],
            embed(x[:, k + 1 : k + 1 + n]),
            (cos[:, :n], sin[:, :n]),
            None,  # sdpa with no mask attends causally (transformers' sdpa_attention_forward: is_causal)
            positions[:, :n],
        )
        lg = model.lm_head(h).float()
        depth_losses.append(
            torch.nn.functional.cross_entropy(lg.reshape(-1, lg.shape[-1]), x[:, k + 2 : k + 2 + n].reshape(-1))
        )
    return main, depth_losses


def train_mtp_target(
    model, layers, blocks: torch.Tensor, settings: MtpTargetSettings, seed: int, progress=None, *, precision: str
) -> dict:
    """Joint training (DeepSeek-V3's objective): L_main + mtp_weight / D * sum_k L_MTP^k."""
    model.train()
    layers.train()
    parameters = list(model.parameters()) + list(layers.parameters())
    tails: dict[str, list[float]] = {"main": [], "mtp": []}

    def loss_fn(step: int) -> torch.Tensor:
        rows = train.batch_indices(step, settings.train.batch, blocks.shape[0], seed)
        with autocast(precision):
            main, depth = mtp_losses(model, layers, blocks[rows])
        mtp = sum(depth) / len(depth)
        tails["main"].append(float(main.detach()))
        tails["mtp"].append(float(mtp.detach()))
        return main + settings.mtp_weight * mtp

    stats = train.run(parameters, loss_fn, settings.train, progress, "mtp-target")
    model.eval()
    layers.eval()
    keep = max(1, settings.train.steps // 10)
    stats["final_main_loss"] = round(sum(tails["main"][-keep:]) / keep, 4)
    stats["final_mtp_loss"] = round(sum(tails["mtp"][-keep:]) / keep, 4)
    stats["mtp_weight"] = settings.mtp_weight
    return stats


def save_mtp_target(model, layers, tokenizer, folder: Path, dtype: torch.dtype, save_causal_lm) -> None:
    """The main model through `save_causal_lm` (the zoo's writer: weights, generation config, tokenizer, portable
    config keys), then the MTP layers added to its model.safetensors under DeepSeek-V3's names."""
    from safetensors.torch import load_file, save_file

    save_causal_lm(model, tokenizer, folder, dtype)
    weights = folder / "model.safetensors"
    tensors = load_file(str(weights))
    embed = model.get_input_embeddings().weight.detach()
    head = model.lm_head.weight.detach()
    for layer in layers:
        for name, tensor in layer.disk_state(model.config, embed, head).items():
            tensors[name] = tensor.detach().to(dtype).contiguous().clone()
    save_file(tensors, str(weights), metadata={"format": "pt"})
    config = json.loads((folder / "config.json").read_text())
    config["num_nextn_predict_layers"] = len(layers)
    (folder / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def load_mtp_target(folder: Path):
    """(model, MTP layers) from a saved folder, float32, eval mode (what the quality figures read)."""
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # the MTP tensors are reported as unused weights of the main model
    try:
        model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32, attn_implementation="sdpa")
    finally:
        hf_logging.set_verbosity(verbosity)
    return model.eval(), load_mtp_layers(folder, model, torch.float32)


# ====================================================================== the zoo stage
def train_stage(
    tokenizer, train_stream: torch.Tensor, profile: Profile, seeds: dict, folder: Path, precision: str, say, save
) -> dict:
    """The `mtp-target` stage: train the MTP target on corpus blocks and save it (weights rounded to the storage
    dtype) to `folder`, with the zoo's tokenizer. `save`: the zoo's causal-LM writer. Returns the training figures."""
    settings = profile.mtp_target
    storage = getattr(torch, profile.storage_dtype)
    model, layers = new_mtp_target(settings, profile, tokenizer, seeds["mtp_target_init"])
    blocks = data.blocks(train_stream, profile.seq_len + 1)
    say(
        f"mtp-target: DeepseekV3 {settings.shape.layers} layers x hidden {settings.shape.hidden} + "
        f"{settings.mtp_layers} MTP layer(s), {_params(model) + _params(layers):,} parameters"
    )
    stats = train_mtp_target(model, layers, blocks, settings, seeds["mtp_target_data"], say, precision=precision)
    save_mtp_target(model, layers, tokenizer, folder, storage, save)
    return stats


def _params(module) -> int:
    return sum(p.numel() for p in module.parameters())


def model_entry(folder: Path, profile: Profile, stats: dict) -> dict:
    model, layers = load_mtp_target(folder)
    settings = profile.mtp_target
    return {
        "path": folder.name,
        "format": (
            "hf DeepseekV3ForCausalLM with num_nextn_predict_layers MTP layers in DeepSeek-V3's layout "
            "(model.layers.{L+k}.*); TensorRT-LLM speculative_config decoding_type MTP"
        ),
        "params": _params(model),
        "mtp_params": sum(_params(layer) for layer in layers),
        "shape": settings.shape.as_dict(),
        "attention": {
            "kind": "multi-head latent attention",
            "kv_lora_rank": settings.kv_lora_rank,
            "qk_nope_head_dim": settings.qk_nope_head_dim,
            "qk_rope_head_dim": settings.qk_rope_head_dim,
            "v_head_dim": settings.v_head_dim,
        },
        "num_nextn_predict_layers": settings.mtp_layers,
        "training": stats,
        "objective": (
            f"DeepSeek-V3's: next-token cross-entropy + {settings.mtp_weight} x the mean MTP cross-entropy (module k "
            "reads the hidden state of position i and the embedding of token i+k, predicts token i+k+1), trained "
            "jointly from scratch on the corpus"
        ),
    }


@torch.no_grad()
def quality(folder: Path, profile: Profile, heldout_stream: torch.Tensor, seed: int) -> dict:
    """The MTP target's own figures: validation loss, and greedy MTP chains (the one layer chained `depth` times,
    as MTP-Eagle drafts) replayed against its greedy continuation of the held-out prompts."""
    model, layers = load_mtp_target(folder)
    settings = profile.mtp_target
    val_blocks = data.blocks(heldout_stream, profile.seq_len + 1, limit=profile.eval_blocks)
    val_loss = target_mod.validation_loss(model, val_blocks)
    g = torch.Generator().manual_seed(seed)
    prompts = data.prompts(heldout_stream, profile.eval_prompts, profile.eval_prompt_len, g)
    sequences = teacher.greedy_continue(model, prompts, profile.eval_new_tokens)
    tallies = {d: mtp_run(model, layers[0], sequences, profile.eval_prompt_len, d) for d in (1, settings.depth)}
    deep = tallies[settings.depth].summary()
    return {
        "validation_loss_nats_per_token": round(val_loss, 4),
        "validation_perplexity": round(float(torch.tensor(val_loss).exp()), 2),
        "depth": settings.depth,
        "top1_per_step": deep["per_step_top1"],
        "chain": deep,
        "chain_depth_1": tallies[1].summary(),
    }


def chain_mask(n_new: int, n_cached: int, dtype: torch.dtype) -> torch.Tensor:
    """[1, 1, n_new, n_cached + n_new] additive mask: every cached entry visible, causal among the new ones."""
    keys = torch.arange(n_cached + n_new)
    visible = keys[None, :] <= (n_cached + torch.arange(n_new))[:, None]
    mask = torch.zeros(n_new, n_cached + n_new, dtype=dtype)
    return mask.masked_fill_(~visible, torch.finfo(dtype).min)[None, None]


@torch.no_grad()
def mtp_run(model, layer, sequences: torch.Tensor, prompt_len: int, depth: int):
    """MTP-Eagle chains: entries (h_p, x_{p+1}) from the target's final hidden states for the accepted prefix, the
    layer's own output while drafting (TensorRT-LLM `MTPEagleWorker`), replayed like the other drafters."""
    from transformers import DynamicCache

    features = teacher.final_features(model, sequences)
    embed = model.get_input_embeddings().weight.detach().float()
    lm_head = model.lm_head.weight.detach().float()
    rotary = model.model.rotary_emb
    tally = evaluate.Tally(depth)
    for i, seq in enumerate(sequences):
        f = features[i]
        cache = DynamicCache(config=layer.config)

        def run(hidden, tokens, start):
            n = hidden.shape[1]
            pos = torch.arange(start, start + n)[None]
            mask = chain_mask(n, cache.get_seq_length(), hidden.dtype)
            return layer(hidden, embed[tokens][None], rotary(hidden, pos), mask, pos, cache)

        def propose(j: int, count: int) -> list[int]:
            fed = cache.get_seq_length()  # entries (h_p, x_{p+1}) for p < fed
            out = run(f[fed:j][None], seq[fed + 1 : j + 1], fed)[:, -1:]
            proposals = []
            for s in range(count):
                token = int((out[0, -1] @ lm_head.T).argmax())
                proposals.append(token)
                if s + 1 < count:
                    out = run(out, torch.tensor([token]), j + s)
            evaluate.crop_to(cache, j)
            return proposals

        evaluate._replay(seq, prompt_len, depth, propose, tally)
    return tally
