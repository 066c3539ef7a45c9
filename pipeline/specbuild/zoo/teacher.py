"""Teacher data: the target's own greedy continuations plus corpus blocks, with the target's features.

Every draft model of the zoo learns from the target, not from the corpus alone: the rows are
(a) corpus prompts continued greedily by the target (what a greedy speculative decoder will verify) and
(b) plain corpus blocks. For each row we keep the target's final hidden state (after its final norm,
the feature the target's lm_head reads); the target's logits are `lm_head(features)`, recomputed per batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from specbuild.heads.eagle import cache_kwarg


@dataclass
class TeacherData:
    tokens: torch.Tensor  # [N, T] int64
    features: torch.Tensor  # [N, T, H] float32, target's final-norm hidden states
    lm_head: torch.Tensor  # [V, H] the target's LM head weight (frozen)
    # [N, T] 1.0 at real positions, 0.0 at padding (rows of different lengths padded at the end); None: all real
    mask: torch.Tensor | None = None

    def weight(self, rows: torch.Tensor) -> torch.Tensor | None:
        """The rows' position weights [B, T] (None when every position is real)."""
        return None if self.mask is None else self.mask[rows]

    def target_logits(self, rows: torch.Tensor, positions: slice = slice(None)) -> torch.Tensor:
        return self.features[rows][:, positions] @ self.lm_head.T


def subset(data: TeacherData, rows: torch.Tensor) -> TeacherData:
    """The teacher data of some rows only (same lm_head)."""
    return TeacherData(
        tokens=data.tokens[rows],
        features=data.features[rows],
        lm_head=data.lm_head,
        mask=None if data.mask is None else data.mask[rows],
    )


def new_cache(model):
    from transformers import DynamicCache

    return DynamicCache(config=model.config)


@torch.no_grad()
def greedy_continue(model, prompts: torch.Tensor, new_tokens: int, batch: int = 128) -> torch.Tensor:
    """Greedy continuation of equal-length prompts [N, P] -> [N, P + new_tokens] (no early stop)."""
    out = []
    key = cache_kwarg(model)
    for i in range(0, prompts.shape[0], batch):
        x = prompts[i : i + batch]
        cache = new_cache(model)
        logits = model(input_ids=x, use_cache=True, **{key: cache}).logits
        generated = []
        for _ in range(new_tokens):
            token = logits[:, -1].argmax(-1, keepdim=True)
            generated.append(token)
            logits = model(input_ids=token, use_cache=True, **{key: cache}).logits
        out.append(torch.cat([x, *generated], dim=1))
    return torch.cat(out)


@torch.no_grad()
def final_features(model, tokens: torch.Tensor, batch: int = 32) -> torch.Tensor:
    """The target's last hidden state after its final norm, [N, T, H] float32."""
    return torch.cat(
        [
            model.model(input_ids=tokens[i : i + batch]).last_hidden_state.float()
            for i in range(0, tokens.shape[0], batch)
        ]
    )


def build_teacher_data(model, prompts: torch.Tensor, new_tokens: int, corpus_rows: torch.Tensor) -> TeacherData:
    continued = greedy_continue(model, prompts, new_tokens)
    length = continued.shape[1]
    tokens = torch.cat([continued, corpus_rows[:, :length]])
    return TeacherData(
        tokens=tokens, features=final_features(model, tokens), lm_head=model.lm_head.weight.detach().float().clone()
    )


@torch.no_grad()
def layer_outputs(model, tokens: torch.Tensor, layers, batch: int = 32) -> torch.Tensor:
    """The outputs of the given decoder layers (residual stream after the MLP, before the final norm; what
    TensorRT-LLM captures for EAGLE-3), concatenated in that order: [N, T, len(layers) * H] float32."""
    kept: dict[int, torch.Tensor] = {}
    blocks = model.model.layers
    hooks = [
        blocks[i].register_forward_hook(
            lambda _m, _x, out, i=i: kept.__setitem__(i, out[0] if isinstance(out, tuple) else out)
        )
        for i in sorted(set(layers))
    ]
    try:
        chunks = []
        for i in range(0, tokens.shape[0], batch):
            model.model(input_ids=tokens[i : i + batch])
            chunks.append(torch.cat([kept[layer].float() for layer in layers], dim=-1))
        return torch.cat(chunks)
    finally:
        for hook in hooks:
            hook.remove()
