"""PARD: the distilled draft adapted into a parallel draft model (arXiv 2504.18583), in the layout TensorRT-LLM
loads for `decoding_type: PARD`.

What TensorRT-LLM reads (tensorrt_llm/_torch/models/modeling_speculative.py `PARDForCausalLM`, in the copy the fact
sheet calls SPEC-1.2, search-index id 54558751816): a plain causal LM checkpoint (its architecture from
config.json), and the mask token from that config, `pard_token`, else `mask_token_id`, else `vocab_size`. How it
drafts (tensorrt_llm/_torch/speculative/pard.py@80aa8ca `PARDWorker`): one draft forward over [the newly accepted
tokens, then K - 1 mask tokens] at the next positions; the logits at the last accepted token and at the K - 1 masks
are the K drafts (argmax), and the masks' KV is dropped afterwards (the kv_lens rewind). AMD's reference
implementation drafts the same way (AMD-AGI/PARD pard/pard_infer.py@8a0d2bd: `draft_k - 1` copies of `pard_token`,
the last `draft_k` logits).

How it is trained here, after AMD's trainer (pard/pard_train.py@8a0d2bd, its data collator without the optional
conditional drop): each row is laid out as D copies of itself, copy 0 the real tokens, copy i (1 <= i < D) all
mask tokens, every copy at positions 0..T-1. The query of copy i at position p sees the real tokens 0..p-i and the
masks of copies 1..i at positions p-i+1..p (a real prefix followed by i masks, as at inference), and learns the
token at p + 1. The zoo's vocabulary has no unused id to spend, so the draft's vocabulary grows by one: the mask is
id V (the target's vocabulary size), the embedding gets the mean of the others, the LM-head row starts at zero, and
config.json records `pard_token: V` and `vocab_size: V + 1`. Targets are soft, as for the draft model: at every
position the target's next-token distribution on the teacher rows (its greedy continuations and corpus rows), the
mask never a target.
"""

from __future__ import annotations

import torch

from specbuild.zoo import train
from specbuild.zoo.distill import soft_cross_entropy
from specbuild.zoo.precision import autocast
from specbuild.zoo.teacher import TeacherData


@torch.no_grad()
def add_mask_token(draft) -> int:
    """Grow the draft's vocabulary by one mask token (embedding: the mean row; LM head: a zero row); returns its id
    and records it in the config as `pard_token` (TensorRT-LLM's first choice, AMD's key)."""
    embed = draft.get_input_embeddings()
    head = draft.get_output_embeddings()
    vocab, hidden = embed.weight.shape
    new_embed = torch.nn.Embedding(vocab + 1, hidden, dtype=embed.weight.dtype)
    new_embed.weight[:vocab] = embed.weight
    new_embed.weight[vocab] = embed.weight.mean(0)
    new_head = torch.nn.Linear(hidden, vocab + 1, bias=False, dtype=head.weight.dtype)
    new_head.weight[:vocab] = head.weight
    new_head.weight[vocab] = 0.0
    draft.set_input_embeddings(new_embed)
    draft.set_output_embeddings(new_head)
    draft.config.vocab_size = vocab + 1
    draft.config.pard_token = vocab
    draft.config.spd_type = "pard"  # AMD's marker of a PARD checkpoint
    return vocab


def parallel_layout(length: int, depth: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(position_ids [depth * length], visible [depth * length, depth * length] bool) of a row laid out as `depth`
    copies: copy 0 real, copies 1.. masks. Query (i, p) sees (0, c) for c <= p - i and (j, p - i + j) for 1 <= j <= i."""
    n = depth * length
    copy = torch.arange(n) // length
    pos = torch.arange(n) % length
    qi, qp = copy[:, None], pos[:, None]
    ki, kp = copy[None, :], pos[None, :]
    real = (ki == 0) & (kp <= qp - qi)
    chain = (ki >= 1) & (ki <= qi) & (kp == qp - qi + ki)
    return pos, real | chain


def parallel_inputs(tokens: torch.Tensor, depth: int, mask_id: int) -> torch.Tensor:
    """[B, T] -> [B, depth * T]: the row, then depth - 1 rows of mask tokens."""
    masks = torch.full((tokens.shape[0], (depth - 1) * tokens.shape[1]), mask_id, dtype=tokens.dtype)
    return torch.cat([tokens, masks], dim=1)


def additive(visible: torch.Tensor, batch: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The 4D additive mask transformers reads ([B, 1, Q, K]; 0 visible, dtype-min hidden)."""
    mask = torch.zeros(visible.shape, dtype=dtype).masked_fill(~visible, torch.finfo(dtype).min)
    return mask[None, None].expand(batch, 1, *visible.shape)


def valid_queries(length: int, depth: int) -> torch.Tensor:
    """[depth * length] bool: queries with at least one real token before their masks (p >= i)."""
    n = depth * length
    return (torch.arange(n) % length) >= (torch.arange(n) // length)


def train_pard(draft, data: TeacherData, depth: int, schedule, seed: int, progress=None, *, precision: str) -> dict:
    """Fine-tune `draft` (its vocabulary already grown by `add_mask_token`) on the parallel layout; returns the
    training figures."""
    draft.train()
    length = data.tokens.shape[1]
    positions, visible = parallel_layout(length, depth)
    keep = valid_queries(length, depth)
    teacher_position = (torch.arange(depth * length) % length)[keep]
    mask_id = draft.config.pard_token

    def loss_fn(step: int) -> torch.Tensor:
        rows = train.batch_indices(step, schedule.batch, data.tokens.shape[0], seed)
        x = parallel_inputs(data.tokens[rows], depth, mask_id)
        with torch.no_grad():
            teacher = data.target_logits(rows)[:, teacher_position]  # [B, Q, V]
            teacher = torch.cat([teacher, torch.full_like(teacher[..., :1], float("-inf"))], dim=-1)  # never the mask
        with autocast(precision):
            logits = draft(
                input_ids=x,
                attention_mask=additive(visible, x.shape[0]),
                position_ids=positions[None].expand(x.shape[0], -1),
            ).logits
        weight = data.weight(rows)  # padded rows (teacher data of several lengths): padding weighs nothing
        return soft_cross_entropy(logits[:, keep], teacher, None if weight is None else weight[:, teacher_position])

    stats = train.run(list(draft.parameters()), loss_fn, schedule, progress, "pard")
    draft.eval()
    return {**stats, "depth": depth}
