"""The quality figures a zoo manifest records, measured on the stored files and held-out prompts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

import torch

from specbuild.heads.eagle import load_eagle_head
from specbuild.heads.eagle3 import load_eagle3_head
from specbuild.heads.medusa import load_medusa_heads
from specbuild.zoo import data, evaluate, mtp_target, target as target_mod, teacher
from specbuild.zoo.profiles import Profile

Progress = Callable[[str], None]


def load_causal_lm(folder: Path):
    from transformers import LlamaForCausalLM

    model = LlamaForCausalLM.from_pretrained(str(folder), dtype=torch.float32)
    model.config._attn_implementation = "sdpa"
    return model.eval()


def measure_quality(root: Path, profile: Profile, heldout_stream: torch.Tensor, seed: int, say: Progress) -> dict:
    """Every figure from the stored files: validation loss, greedy acceptance of each drafter."""
    target = load_causal_lm(root / "target")
    draft = load_causal_lm(root / "draft")
    medusa = load_medusa_heads(root / "medusa")
    eagle = load_eagle_head(root / "eagle", target)

    val_blocks = data.blocks(heldout_stream, profile.seq_len + 1, limit=profile.eval_blocks)
    val_loss = target_mod.validation_loss(target, val_blocks)
    sequences = heldout_sequences(target, profile, heldout_stream, seed)
    features = teacher.final_features(target, sequences)
    lm_head = target.lm_head.weight.detach()
    p = profile.eval_prompt_len
    say(f"evaluating on {sequences.shape[0]} held-out prompts x {profile.eval_new_tokens} greedy tokens")

    draft_tally = evaluate.draft_model_run(draft, sequences, p, profile.draft_k)
    medusa_tally, medusa_top1 = evaluate.medusa_run(medusa, features, sequences, p)
    eagle_tally = evaluate.eagle_run(eagle, features, sequences, lm_head, p, profile.eagle_depth)
    quality = {
        "heldout": {
            "prompts": profile.eval_prompts,
            "prompt_tokens": p,
            "greedy_new_tokens": profile.eval_new_tokens,
            "validation_blocks": int(val_blocks.shape[0]),
            "validation_block_tokens": profile.seq_len,
        },
        "target": {
            "validation_loss_nats_per_token": round(val_loss, 4),
            "validation_perplexity": round(float(torch.tensor(val_loss).exp()), 2),
        },
        "draft_model": {"k": profile.draft_k, **draft_tally.summary()},
        "medusa": {"top1_per_head": medusa_top1, "chain": medusa_tally.summary()},
        "eagle": {
            "depth": profile.eagle_depth,
            "top1_per_step": eagle_tally.summary()["per_step_top1"],
            "chain": eagle_tally.summary(),
        },
        **({"eagle3": eagle3_quality(root, profile, target, sequences)} if (root / "eagle3").is_dir() else {}),
        **({"pard": pard_quality(root, profile, target, sequences)} if (root / "pard").is_dir() else {}),
        **(
            {"mtp-target": mtp_target.quality(root / "mtp-target", profile, heldout_stream, seed)}
            if (root / "mtp-target").is_dir() and profile.mtp_target is not None
            else {}
        ),
        "method": (
            "greedy chains (top-1 drafts, no trees) replayed against the target's greedy continuation; "
            "mean_acceptance_length counts the bonus token; per-step top-1 is conditional on the "
            "earlier steps matching (EAGLE: steps >= 2 read the head's own features)"
        ),
    }
    say(
        "quality: "
        + json.dumps(
            {
                "val_loss": quality["target"]["validation_loss_nats_per_token"],
                "draft_acc": quality["draft_model"]["acceptance_rate"],
                "medusa_top1": medusa_top1,
                "eagle_top1": quality["eagle"]["top1_per_step"],
            }
        )
    )
    return quality


def heldout_sequences(target, profile: Profile, heldout_stream: torch.Tensor, seed: int) -> torch.Tensor:
    """The held-out prompts every drafter is measured on, continued greedily by the target."""
    g = torch.Generator().manual_seed(seed)
    prompts = data.prompts(heldout_stream, profile.eval_prompts, profile.eval_prompt_len, g)
    return teacher.greedy_continue(target, prompts, profile.eval_new_tokens)


def eagle3_quality(root: Path, profile: Profile, target, sequences: torch.Tensor) -> dict:
    """Greedy chain replay of the stored EAGLE-3 head (depth `eagle_depth`) and its draft vocabulary's coverage of
    the target's held-out greedy tokens (a token outside it can never be drafted)."""
    head = load_eagle3_head(root / "eagle3", target)
    layers = list(profile.eagle3.layers)
    captured = teacher.layer_outputs(target, sequences, layers)
    embed = target.get_input_embeddings().weight.detach().float()
    p = profile.eval_prompt_len
    tally = evaluate.eagle3_run(head, captured, sequences, embed, p, profile.eagle_depth)
    generated = sequences[:, p:]
    return {
        "depth": profile.eagle_depth,
        "layers": layers,
        "draft_vocab_size": head.draft_vocab_size,
        "draft_vocab_coverage": round(float(head.t2d[generated].float().mean()), 4),
        "top1_per_step": tally.summary()["per_step_top1"],
        "chain": tally.summary(),
    }


def pard_quality(root: Path, profile: Profile, target, sequences: torch.Tensor) -> dict:
    """Greedy chain replay of the stored PARD draft: each step one forward over the accepted text and K - 1 masks
    (K = the profile's draft_k, at most the trained depth)."""
    draft = load_causal_lm(root / "pard")
    k = min(profile.draft_k, profile.pard.depth)
    tally = evaluate.pard_run(draft, sequences, profile.eval_prompt_len, k, int(draft.config.pard_token))
    return {"k": k, "top1_per_step": tally.summary()["per_step_top1"], "chain": tally.summary()}
