"""Training the EAGLE-3 head from the target's teacher data (EAGLE-3's "training-time test", SafeAILab/EAGLE
`eagle/traineagle3/cnets.py` and `main.py`, re-implemented).

- Draft vocabulary: the `draft_vocab` most frequent tokens among the teacher rows' predicted positions, sorted by id
  (d2t[i] = id_i - i, t2d[id] = True).
- Inputs: the outputs of the captured target layers at every position (frozen target), the target's frozen embedding.
- Unrolled steps k = 0..S-1 over all positions t at once: step 0 reads fc(captured at t) with token t+1 at position t;
  step k > 0 reads the head's own step k-1 output at t with token t+1+k at position t+k. Step k's queries attend to
  step 0's keys causally (positions <= t) and to the keys of steps 1..k at the same t only: exactly what drafting
  pass k+1 sees at inference (the verified entries, then its own chain).
- Loss at step k: soft cross-entropy against the target's next-token distribution at t+1+k restricted to the draft
  vocabulary (renormalised), on positions whose target argmax is in the draft vocabulary, weighted 0.8^k.
- Initialisation (ours): lm_head = the target's lm_head rows of the draft vocabulary, norm = the target's final norm,
  fc passes the last captured layer through; the embedding is never trained (it is the target's).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from specbuild.zoo import train
from specbuild.zoo.precision import autocast
from specbuild.zoo.profiles import Schedule

STEP_DECAY = 0.8


@torch.no_grad()
def vocabulary_counts(tokens: torch.Tensor, vocab: int) -> torch.Tensor:
    """How often each token is a prediction target (positions 1.. of every row)."""
    return torch.bincount(tokens[:, 1:].flatten(), minlength=vocab)


@torch.no_grad()
def init_from_target(head, target) -> None:
    """lm_head from the target's rows of the draft vocabulary, norm from its final norm, fc = pass the last captured
    layer through (so the untrained head starts as 'the target's own next-token guess at p')."""
    ids = head.draft_to_target
    head.lm_head.weight.copy_(target.lm_head.weight.detach().float()[ids])
    head.norm.weight.copy_(target.model.norm.weight.detach().float())
    if head.fc is not None:
        hidden = head.hidden_size
        head.fc.weight.zero_()
        head.fc.weight[:, -hidden:] = torch.eye(hidden)


def ttt_attention(q: torch.Tensor, keys: list[torch.Tensor], values: list[torch.Tensor]) -> torch.Tensor:
    """Attention of step-k queries q [B, A, T, D]: causal over keys[0] (step 0), plus the same position's key of each
    later step keys[1..k] (each [B, A, T, D]). Returns [B, A, T, D]."""
    scale = 1.0 / math.sqrt(q.shape[-1])
    t = q.shape[-2]
    first = (q @ keys[0].transpose(-1, -2)) * scale
    first = first.masked_fill(torch.ones(t, t, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    own = [(q * k).sum(-1, keepdim=True) * scale for k in keys[1:]]
    weights = torch.softmax(torch.cat([first, *own], dim=-1), dim=-1)
    out = weights[..., :t] @ values[0]
    for j, v in enumerate(values[1:]):
        out = out + weights[..., t + j : t + j + 1] * v
    return out


def unrolled_logits(head, captured: torch.Tensor, embed: torch.Tensor, tokens: torch.Tensor, steps: int):
    """The head's draft logits [B, T', V_d] at each unrolled step (T' = T - steps): step k, entry t predicts
    token t + 2 + k."""
    length = tokens.shape[1] - steps
    attn = head.midlayer.self_attn
    hidden = head.fuse(captured[:, :length])
    keys: list[torch.Tensor] = []
    values: list[torch.Tensor] = []
    logits = []
    base = torch.arange(length, device=tokens.device)[None].expand(tokens.shape[0], -1)
    for k in range(steps):
        embeds = F.embedding(tokens[:, 1 + k : 1 + k + length], embed)
        q, key, value = head.midlayer.project(hidden, embeds, base + k)
        keys.append(attn.expand_kv(key))
        values.append(attn.expand_kv(value))
        hidden = head.midlayer.finish(ttt_attention(q, keys, values), hidden)
        logits.append(head.logits(hidden))
    return logits


def eagle3_loss(
    head, data, captured: torch.Tensor, embed: torch.Tensor, rows: torch.Tensor, steps: int, precision: str
) -> torch.Tensor:
    """The training-time-test loss on teacher rows `rows` (positions of padded rows marked by `data.weight`)."""
    length = data.tokens.shape[1] - steps
    draft_ids = head.draft_to_target
    in_vocab = head.t2d
    tokens = data.tokens[rows]
    weight = data.weight(rows)
    with autocast(precision, tokens.device.type):
        per_step = unrolled_logits(head, captured[rows], embed, tokens, steps)
    total = 0.0
    for k, logits in enumerate(per_step):
        with torch.no_grad():
            teacher = data.target_logits(rows, slice(1 + k, 1 + k + length))  # predicts token t + 2 + k
            mask = in_vocab[teacher.argmax(-1)].float()
            if weight is not None:
                mask = mask * weight[:, 1 + k : 1 + k + length]
            target = F.softmax(teacher[..., draft_ids], dim=-1)
        ce = -(target * F.log_softmax(logits.float(), dim=-1)).sum(-1)
        total = total + STEP_DECAY**k * (ce * mask).sum() / mask.sum().clamp(min=1.0)
    return total


def train_eagle3(
    head,
    data,
    captured: torch.Tensor,
    embed: torch.Tensor,
    schedule: Schedule,
    steps: int,
    seed: int,
    progress=None,
    *,
    precision: str,
) -> dict:
    """Train `head` (vocabulary already set) on teacher rows `data` with their captured layer outputs."""
    head.train()

    def loss_fn(step: int) -> torch.Tensor:
        rows = train.batch_indices(step, schedule.batch, data.tokens.shape[0], seed)
        return eagle3_loss(head, data, captured, embed, rows, steps, precision)

    stats = train.run(list(head.parameters()), loss_fn, schedule, progress, "eagle3")
    head.eval()
    return stats
