"""Token streams and fixed-length blocks for training and evaluation."""

from __future__ import annotations

import torch


def encode_documents(tokenizer, documents: list[str]) -> torch.Tensor:
    """One stream: <s> doc </s> <s> doc </s> ... (the tokenizer adds <s>; </s> separates documents)."""
    eos = tokenizer.eos_token_id
    ids: list[int] = []
    for enc in tokenizer(documents, add_special_tokens=True, verbose=False)["input_ids"]:
        ids.extend(enc)
        ids.append(eos)
    return torch.tensor(ids, dtype=torch.long)


def blocks(stream: torch.Tensor, length: int, limit: int | None = None) -> torch.Tensor:
    """Non-overlapping blocks [N, length] cut from the stream (the tail is dropped)."""
    n = stream.numel() // length
    if limit is not None:
        n = min(n, limit)
    return stream[: n * length].view(n, length).clone()


def prompts(stream: torch.Tensor, count: int, length: int, generator: torch.Generator) -> torch.Tensor:
    """`count` prompts of `length` tokens taken at random offsets (each starts with <s> + text)."""
    starts = torch.randint(0, stream.numel() - length, (count,), generator=generator)
    return torch.stack([stream[s : s + length] for s in starts.tolist()])
