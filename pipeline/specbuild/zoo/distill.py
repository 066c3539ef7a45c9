"""Training the draft model, the Medusa heads and the EAGLE-1 head from the target's teacher data.

- draft:  KL(p_target(. | x_<=t) || p_draft(. | x_<=t)) at every position (soft targets).
- Medusa: head k at position t matches the target's distribution at t+1+k (the token at t+2+k),
          weighted 0.8^k (Medusa-2 self-distillation, soft targets).
- EAGLE:  feature regression SmoothL1(f̂_{t+1}, f_{t+1}) + 0.1 * CE(softmax(lm_head f_{t+1}), lm_head f̂_{t+1})
          from inputs (f_t, x_{t+1}) (the EAGLE paper's objective; uniform noise on input features).
All three train at the build's precision (`specbuild.zoo.precision`): bf16 autocast with fp32 master
weights where the CPU has native bf16, float32 elsewhere.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from specbuild.zoo import train
from specbuild.zoo.precision import autocast
from specbuild.zoo.profiles import Schedule
from specbuild.zoo.teacher import TeacherData

MEDUSA_DECAY = 0.8
EAGLE_CLS_WEIGHT = 0.1
EAGLE_NOISE = 0.1  # uniform noise half-width on input features, relative to their RMS


def soft_cross_entropy(
    student_logits: torch.Tensor, teacher_logits: torch.Tensor, weight: torch.Tensor | None = None
) -> torch.Tensor:
    """KL(teacher || student) up to the teacher's entropy: -sum p_teacher log p_student, mean over tokens (over the
    tokens `weight` [B, T] marks, weighted, when given: rows of teacher data padded to one length)."""
    teacher = F.softmax(teacher_logits.float(), dim=-1)
    return weighted_mean(-(teacher * F.log_softmax(student_logits.float(), dim=-1)).sum(-1), weight)


def weighted_mean(values: torch.Tensor, weight: torch.Tensor | None) -> torch.Tensor:
    """values.mean(), or the mean over the positions `weight` marks (weight: the same shape, 0 = padding)."""
    if weight is None:
        return values.mean()
    return (values * weight).sum() / weight.sum().clamp(min=1.0)


def draft_loss(draft, data: TeacherData, rows: torch.Tensor, precision: str) -> torch.Tensor:
    """The draft model's loss on teacher rows `rows`: soft cross-entropy to the target at every position."""
    x = data.tokens[rows]
    with torch.no_grad():
        teacher = data.target_logits(rows)
    with autocast(precision, x.device.type):
        logits = draft(input_ids=x).logits
    return soft_cross_entropy(logits, teacher, data.weight(rows))


def train_draft(draft, data: TeacherData, schedule: Schedule, seed: int, progress=None, *, precision: str) -> dict:
    draft.train()

    def loss_fn(step: int) -> torch.Tensor:
        rows = train.batch_indices(step, schedule.batch, data.tokens.shape[0], seed)
        return draft_loss(draft, data, rows, precision)

    stats = train.run(list(draft.parameters()), loss_fn, schedule, progress, "draft")
    draft.eval()
    return stats


def medusa_loss(heads, data: TeacherData, rows: torch.Tensor, precision: str) -> torch.Tensor:
    """Head k at position t against the target's distribution at t + 1 + k, weighted MEDUSA_DECAY^k."""
    length = data.tokens.shape[1]
    features = data.features[rows]
    weight = data.weight(rows)
    with torch.no_grad():
        teacher = features @ data.lm_head.T  # teacher[:, t] scores the token at t + 1
    total = 0.0
    for k, head in enumerate(heads.heads):
        span = length - 1 - k  # positions t with a teacher at t + 1 + k
        with autocast(precision, features.device.type):
            logits = head(features[:, :span])
        kept = None if weight is None else weight[:, 1 + k : 1 + k + span]
        total = total + MEDUSA_DECAY**k * soft_cross_entropy(logits, teacher[:, 1 + k : 1 + k + span], kept)
    return total


def train_medusa(heads, data: TeacherData, schedule: Schedule, seed: int, progress=None, *, precision: str) -> dict:
    heads.train()
    heads.init_from_lm_head(data.lm_head)

    def loss_fn(step: int) -> torch.Tensor:
        rows = train.batch_indices(step, schedule.batch, data.tokens.shape[0], seed)
        return medusa_loss(heads, data, rows, precision)

    stats = train.run(list(heads.parameters()), loss_fn, schedule, progress, "medusa")
    heads.eval()
    return stats


@torch.no_grad()
def init_eagle_head(head, target) -> None:
    """Embedding copied from the target (frozen); fc starts as 'pass the feature through'."""
    head.copy_embedding_from(target)
    hidden = head.fc.weight.shape[0]
    head.fc.weight.zero_()
    head.fc.weight[:, hidden:] = torch.eye(hidden)
    head.fc.bias.zero_()


def eagle_noise_scale(data: TeacherData) -> float:
    """The RMS of the teacher features (over the real positions of padded rows): EAGLE_NOISE is relative to it."""
    if data.mask is None:
        return data.features.pow(2).mean().sqrt().item()
    kept = data.mask.bool()
    return data.features[kept].pow(2).mean().sqrt().item()


def eagle_loss(
    head, data: TeacherData, rows: torch.Tensor, noise_gen: torch.Generator, rms: float, precision: str
) -> torch.Tensor:
    """From (f_t + noise, x_{t+1}) predict f_{t+1}: SmoothL1 regression + EAGLE_CLS_WEIGHT x soft CE through the
    target's lm_head."""
    length = data.tokens.shape[1]
    x, f = data.tokens[rows], data.features[rows]
    positions = torch.arange(length - 1, device=x.device)[None]
    weight = data.weight(rows)
    kept = None if weight is None else weight[:, 1:]
    noise = (torch.rand(f[:, :-1].shape, generator=noise_gen) * 2 - 1).to(f.device)  # drawn on the CPU: any device
    inputs = f[:, :-1] + noise * EAGLE_NOISE * rms
    with autocast(precision, x.device.type):
        predicted = head(inputs, x[:, 1:], positions.expand(x.shape[0], -1))
    predicted = predicted.float()
    if kept is None:
        regression = F.smooth_l1_loss(predicted, f[:, 1:])
    else:
        regression = weighted_mean(F.smooth_l1_loss(predicted, f[:, 1:], reduction="none").mean(-1), kept)
    with torch.no_grad():
        teacher = f[:, 1:] @ data.lm_head.T
    classification = soft_cross_entropy(predicted @ data.lm_head.T, teacher, kept)
    return regression + EAGLE_CLS_WEIGHT * classification


def train_eagle(head, data: TeacherData, schedule: Schedule, seed: int, progress=None, *, precision: str) -> dict:
    head.train()
    rms = eagle_noise_scale(data)
    noise_gen = torch.Generator().manual_seed(seed + 7)

    def loss_fn(step: int) -> torch.Tensor:
        rows = train.batch_indices(step, schedule.batch, data.tokens.shape[0], seed)
        return eagle_loss(head, data, rows, noise_gen, rms, precision)

    stats = train.run([p for p in head.parameters() if p.requires_grad], loss_fn, schedule, progress, "eagle")
    head.eval()
    return stats
