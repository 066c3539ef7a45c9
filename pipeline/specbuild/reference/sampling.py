"""Sampling transforms, shared by every method and applied identically to the target (p) and the draft (q).

logits --temperature--> --top-k--> --top-p--> probabilities. Temperature 0 (or top_k 1) is greedy decoding:
the argmax of the logits, ties broken towards the lowest token id (torch.argmax).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class SamplingConfig:
    """Per-request sampling. temperature 0.0 = greedy; top_k 0 = off; top_p 1.0 = off.

    seed: the request's own random stream (a torch.Generator seeded with it); None means seed 0, so a request
    is reproducible unless the caller varies the seed (as TensorRT-LLM's default random_seed).
    """

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int | None = None

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0 or self.top_k == 1

    def problems(self) -> list[str]:
        out = []
        if not self.temperature >= 0.0:
            out.append(f"temperature={self.temperature} must be >= 0 (0 = greedy)")
        if self.top_k < 0:
            out.append(f"top_k={self.top_k} must be >= 0 (0 = off)")
        if not 0.0 < self.top_p <= 1.0:
            out.append(f"top_p={self.top_p} must be in (0, 1] (1 = off)")
        return out


def probabilities(logits: torch.Tensor, cfg: SamplingConfig) -> torch.Tensor:
    """Token probabilities after temperature, top-k and top-p, over the last axis (any leading shape).

    Greedy configs give the one-hot distribution of the argmax. Logits of -inf (masked tokens) stay at 0.
    """
    logits = logits.float()
    if cfg.greedy:
        return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).float()
    logits = logits / cfg.temperature
    if cfg.top_k > 0 and cfg.top_k < logits.shape[-1]:
        kth = torch.topk(logits, cfg.top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    if cfg.top_p < 1.0:
        probs = top_p_filter(probs, cfg.top_p)
    return probs


def top_p_filter(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """Keep the smallest set of most likely tokens whose mass reaches top_p (always the first), renormalised."""
    sorted_probs, order = torch.sort(probs, dim=-1, descending=True)
    mass_before = torch.cumsum(sorted_probs, dim=-1) - sorted_probs
    keep_sorted = mass_before < top_p
    keep_sorted[..., 0] = True
    keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
    probs = probs * keep
    return probs / probs.sum(-1, keepdim=True)


def sample(probs: torch.Tensor, generator: torch.Generator) -> int:
    """Draw one token from a [V] distribution with the request's generator."""
    return int(torch.multinomial(probs, 1, generator=generator).item())


def uniform(generator: torch.Generator) -> float:
    return float(torch.rand((), generator=generator).item())


def residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """norm(max(0, p - q)): what to sample from after the target rejects a draft token.

    If p <= q everywhere (only possible when p == q, where rejection has probability 0) fall back to p.
    """
    r = torch.clamp(p - q, min=0.0)
    total = r.sum()
    if total <= 0:
        return p
    return r / total
