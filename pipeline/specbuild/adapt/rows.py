"""Teacher rows: each record's prompt and the target's answer with the target's hidden states, padded to one length
so that the zoo's losses (zoo/distill.py, zoo/distill_eagle3.py) train on them as they train the zoo's heads
(`TeacherData`, with `mask` marking the real positions).

What is learnt: only the answers. `mask` marks a row's answer tokens, so each loss counts the predictions of answer
tokens (EAGLE: the feature after each answer token's input; Medusa: the answer tokens k + 1 ahead; the draft model:
its next-token distribution at answer positions) and the head still reads the whole row, prompt included, as it does
when it drafts. A head never drafts inside a prompt: learning to predict the target there (traffic of another
domain, often byte soup) would spend the training on what is never verified.

A row longer than MAX_ROW_TOKENS keeps its last MAX_ROW_TOKENS tokens (the answer and the end of the prompt: what
the head drafts and what it reads just before)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from specbuild.zoo.teacher import TeacherData

MAX_ROW_TOKENS = 1024


@dataclass
class Row:
    """One record's teacher row (CPU tensors)."""

    tokens: list[int]  # prompt + answer
    prompt_len: int
    final: torch.Tensor  # [T, H] the target's final hidden states (after the final norm)
    captured: torch.Tensor | None = None  # [T, n x H] the captured layers (EAGLE-3)

    def clipped(self) -> "Row":
        cut = max(0, len(self.tokens) - MAX_ROW_TOKENS)
        if not cut:
            return self
        return Row(
            self.tokens[cut:],
            max(1, self.prompt_len - cut),
            self.final[cut:],
            None if self.captured is None else self.captured[cut:],
        )


@dataclass
class Rows:
    """Rows padded at the end to one length, as training batches read them."""

    data: TeacherData  # tokens [N, T], features [N, T, H], lm_head [V, H], mask [N, T]
    captured: torch.Tensor | None  # [N, T, n x H]
    prompt_lens: list[int]
    lengths: list[int]

    def __len__(self) -> int:
        return len(self.lengths)

    def one(self, i: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Row i unpadded: tokens [1, L], features [1, L, H], captured [1, L, n x H] (for the greedy replays)."""
        n = self.lengths[i]
        captured = None if self.captured is None else self.captured[i : i + 1, :n]
        return self.data.tokens[i : i + 1, :n], self.data.features[i : i + 1, :n], captured

    def to(self, device) -> "Rows":
        d = self.data
        moved = TeacherData(d.tokens.to(device), d.features.to(device), d.lm_head.to(device), d.mask.to(device))
        captured = None if self.captured is None else self.captured.to(device)
        return Rows(moved, captured, self.prompt_lens, self.lengths)


def pad_rows(rows: list[Row], lm_head: torch.Tensor, pad_id: int) -> Rows:
    rows = [r.clipped() for r in rows]
    width = max(len(r.tokens) for r in rows)
    hidden = rows[0].final.shape[-1]
    n = len(rows)
    tokens = torch.full((n, width), int(pad_id), dtype=torch.long)
    features = torch.zeros(n, width, hidden, dtype=torch.float32)
    mask = torch.zeros(n, width, dtype=torch.float32)
    captured = None
    if rows[0].captured is not None:
        captured = torch.zeros(n, width, rows[0].captured.shape[-1], dtype=torch.float32)
    for i, r in enumerate(rows):
        length = len(r.tokens)
        tokens[i, :length] = torch.tensor(r.tokens, dtype=torch.long)
        features[i, :length] = r.final
        mask[i, r.prompt_len : length] = 1.0  # the answer
        if captured is not None:
            captured[i, :length] = r.captured
    data = TeacherData(tokens=tokens, features=features, lm_head=lm_head.float(), mask=mask)
    return Rows(data, captured, [r.prompt_len for r in rows], [len(r.tokens) for r in rows])
