"""A small, deterministic AdamW training loop shared by every model of the zoo."""

from __future__ import annotations

import math
import time
from typing import Callable

import torch

from specbuild.zoo.profiles import Schedule


def lr_at(step: int, schedule: Schedule) -> float:
    """Linear warm-up, then cosine decay to 10% of the peak."""
    if step < schedule.warmup:
        return schedule.lr * (step + 1) / schedule.warmup
    progress = (step - schedule.warmup) / max(1, schedule.steps - schedule.warmup)
    return schedule.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def run(
    parameters: list[torch.nn.Parameter],
    loss_fn: Callable[[int], torch.Tensor],
    schedule: Schedule,
    progress: Callable[[str], None] | None = None,
    label: str = "train",
    after_step: Callable[[int, float], bool] | None = None,
) -> dict:
    """Run `schedule.steps` optimizer steps of `loss_fn(step)`; return timing and loss figures. `after_step(step,
    loss)`, called after each step, ends the run early by returning True (specbuild.adapt: early stopping, a time
    budget); `steps` in the figures is the number of steps run."""
    params = [p for p in parameters if p.requires_grad]
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": schedule.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=schedule.lr,
        betas=(0.9, 0.95),
        eps=1e-8,
    )
    start, losses = time.perf_counter(), []
    for step in range(schedule.steps):
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, schedule)
        loss = loss_fn(step)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        losses.append(float(loss.detach()))
        if progress and (step % 50 == 0 or step == schedule.steps - 1):
            progress(
                f"{label}: step {step + 1}/{schedule.steps} loss {losses[-1]:.3f} ({time.perf_counter() - start:.0f}s)"
            )
        if after_step is not None and after_step(step, losses[-1]):
            break
    tail = losses[-max(1, len(losses) // 10) :] or [math.nan]
    return {
        "steps": len(losses),
        "batch": schedule.batch,
        "peak_lr": schedule.lr,
        "seconds": round(time.perf_counter() - start, 1),
        "final_loss": round(sum(tail) / len(tail), 4),
    }


def batch_indices(step: int, batch: int, population: int, seed: int) -> torch.Tensor:
    """The rows for `step`: a fixed permutation per epoch, so every row is seen once per epoch."""
    per_epoch = max(1, population // batch)
    epoch, offset = divmod(step, per_epoch)
    perm = torch.randperm(population, generator=torch.Generator().manual_seed(seed * 1_000_003 + epoch))
    return perm[offset * batch : offset * batch + batch]
