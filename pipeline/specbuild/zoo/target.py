"""The target: a LlamaForCausalLM trained from scratch on the corpus (next-token cross-entropy)."""

from __future__ import annotations

import torch

from specbuild.zoo import train
from specbuild.zoo.precision import autocast
from specbuild.zoo.profiles import LlamaShape, Profile


def llama_config(shape: LlamaShape, profile: Profile, tokenizer):
    from transformers import LlamaConfig

    config = LlamaConfig(
        vocab_size=profile.vocab_size,
        hidden_size=shape.hidden,
        intermediate_size=shape.intermediate,
        num_hidden_layers=shape.layers,
        num_attention_heads=shape.heads,
        num_key_value_heads=shape.heads,
        max_position_embeddings=profile.max_position_embeddings,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        hidden_act="silu",
        tie_word_embeddings=False,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        initializer_range=0.02,
    )
    config._attn_implementation = "sdpa"
    return config


def new_model(shape: LlamaShape, profile: Profile, tokenizer, seed: int):
    from transformers import LlamaForCausalLM

    torch.manual_seed(seed)
    return LlamaForCausalLM(llama_config(shape, profile, tokenizer))


def train_target(
    model, train_blocks: torch.Tensor, profile: Profile, seed: int, progress=None, *, precision: str
) -> dict:
    """Plain language-model training on corpus blocks [N, seq_len] at `precision` (see `zoo.precision`)."""
    schedule = profile.target_train
    model.train()

    def loss_fn(step: int) -> torch.Tensor:
        rows = train.batch_indices(step, schedule.batch, train_blocks.shape[0], seed)
        x = train_blocks[rows]
        with autocast(precision):
            logits = model(input_ids=x[:, :-1]).logits
        return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1))

    stats = train.run(list(model.parameters()), loss_fn, schedule, progress, "target")
    model.eval()
    return stats


@torch.no_grad()
def validation_loss(model, blocks: torch.Tensor, batch: int = 16) -> float:
    """Mean next-token cross-entropy (nats/token) over held-out blocks."""
    total, count = 0.0, 0
    for i in range(0, blocks.shape[0], batch):
        x = blocks[i : i + batch]
        logits = model(input_ids=x[:, :-1]).logits.float()
        total += torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1), reduction="sum"
        ).item()
        count += x[:, 1:].numel()
    return total / count
