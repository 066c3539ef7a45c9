"""Sampling transforms, shared by every method and applied identically to the target (p) and the draft (q).

    logits --temperature--> --penalties--> (masks) --top-k--> --softmax--> --top-p--> probabilities

as TensorRT-LLM's C++ sampler applies them: `cpp/tensorrt_llm/kernels/penaltyKernels.cu` (`batchApplyPenalty`)
scales the logits by the inverse temperature *first*, then, for every token that occurs in the sequence so far
(prompt + generated tokens):
    repetition_penalty r (> 0):  logit / r if logit >= 0, else logit * r   (once per token, however often it occurs)
    presence_penalty   c:        logit - c                                 (once per token)
    frequency_penalty  f:        logit - f * (number of occurrences)
then bans the end id while fewer than min_tokens tokens were generated (here: the executor's Sequence, with bad
words); the sampling layers (`samplingTopKKernels.cu`, `samplingTopPKernels.cu`) do top-k / top-p after that.
The prompt counts for all three penalties: the kernel counts tokens [prompt_ignore_length, input length) of the
prompt with the output (`penaltyWorkspace[index + vocabSize]`); prompt_ignore_length defaults to 0 (TensorRT-LLM's
SamplingParams: "Values <= 0 have no effect").
TensorRT-LLM's PyTorch TorchSampler (the llm-api flavour; PR #16485 "implement repetition / frequency / presence
penalties for TorchSampler") applies the penalties *before* the temperature: `penalties_before_temperature`.

Temperature 0 (or top_k 1) is greedy decoding: the argmax of the processed logits, ties broken towards the lowest
token id (torch.argmax). Greedy with a positive temperature (top_k 1) scales before the penalties, as the kernel
does; at temperature 0 the penalties act on the unscaled logits (the kernel would multiply by 1/(0 + 1e-6) first,
which leaves additive penalties a millionth of their value: send top_k 1 for greedy decoding with penalties, as
NVIDIA's clients do, and both agree).

Log probabilities (`log_prob`): TensorRT-LLM's sampling kernels report log p(token) under the softmax of the
processed logits over the whole vocabulary (cum_log_probs adds these), and output_log_probs normalises by the
top-k set's mass under `normalize_log_probs` in the top-k kernel (`log P(i | i is in top-k)`; greedy = top-k 1
gives 0); the top-p kernel reports the unnormalised value.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from specbuild.standalone import request_checks as checks


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
    repetition_penalty: float = 1.0  # 1 = off
    presence_penalty: float = 0.0  # 0 = off
    frequency_penalty: float = 0.0  # 0 = off
    penalties_before_temperature: bool = False  # TorchSampler's order (llm-api flavour); False: the C++ kernel's

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0 or self.top_k == 1

    @property
    def penalized(self) -> bool:
        """True when a penalty changes the logits (they then depend on the tokens so far)."""
        return self.repetition_penalty != 1.0 or self.presence_penalty != 0.0 or self.frequency_penalty != 0.0

    def problems(self) -> list[str]:
        """The request rules of standalone/request_checks.py (one definition for every core), in this config's
        terms: top_p is 1 when off here (the cores turn a request's 0 into off before they get here)."""
        out = []
        if not checks.temperature_ok(self.temperature):
            out.append(f"temperature={self.temperature} must be a finite number >= 0 (0 = greedy)")
        if not checks.top_k_ok(self.top_k):
            out.append(f"top_k={self.top_k} must be >= 0 (0 = off)")
        if not (checks.top_p_ok(self.top_p) and self.top_p > 0.0):
            out.append(f"top_p={self.top_p} must be in (0, 1] (1 = off)")
        if not checks.repetition_penalty_ok(self.repetition_penalty):
            out.append(f"repetition_penalty={self.repetition_penalty} must be a finite number > 0 (1 = off)")
        for name in ("presence_penalty", "frequency_penalty"):
            if not checks.additive_penalty_ok(getattr(self, name)):
                out.append(f"{name}={getattr(self, name)} must be a finite number (0 = off)")
        return out


def scale(logits: torch.Tensor, cfg: SamplingConfig) -> torch.Tensor:
    """logits / temperature (float32); temperature 0 (greedy) leaves them as they are."""
    logits = logits.float()
    return logits / cfg.temperature if cfg.temperature > 0.0 and cfg.temperature != 1.0 else logits


def penalize(logits: torch.Tensor, counts: torch.Tensor, cfg: SamplingConfig) -> torch.Tensor:
    """The three penalties of `batchApplyPenalty` (penaltyKernels.cu): counts[..., v] is how often token v occurs
    in the context of that row (prompt + generated so far + the draft path above it)."""
    seen = counts > 0
    if cfg.repetition_penalty != 1.0:
        r = cfg.repetition_penalty
        logits = torch.where(seen, torch.where(logits < 0, logits * r, logits / r), logits)
    if cfg.presence_penalty != 0.0:
        logits = logits - cfg.presence_penalty * seen.to(logits.dtype)
    if cfg.frequency_penalty != 0.0:
        logits = logits - cfg.frequency_penalty * counts.to(logits.dtype)
    return logits


def processed_logits(logits: torch.Tensor, cfg: SamplingConfig, counts: torch.Tensor | None = None) -> torch.Tensor:
    """Temperature and penalties, in TensorRT-LLM's order (the C++ kernel's, or TorchSampler's with
    `penalties_before_temperature`). counts: None when no penalty applies (see `penalize`)."""
    if counts is None or not cfg.penalized:
        return scale(logits, cfg)
    if cfg.penalties_before_temperature:
        return scale(penalize(logits.float(), counts, cfg), cfg)
    return penalize(scale(logits, cfg), counts, cfg)


def distribution(processed: torch.Tensor, cfg: SamplingConfig) -> torch.Tensor:
    """Token probabilities from processed logits (`processed_logits`, masks applied): top-k, softmax, top-p over
    the last axis (any leading shape). Greedy configs give the one-hot distribution of the argmax. Logits of -inf
    (masked tokens) stay at 0."""
    logits = processed.float()
    if cfg.greedy:
        return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).float()
    if cfg.top_k > 0 and cfg.top_k < logits.shape[-1]:
        kth = torch.topk(logits, cfg.top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    if cfg.top_p < 1.0:
        probs = top_p_filter(probs, cfg.top_p)
    return probs


def probabilities(logits: torch.Tensor, cfg: SamplingConfig, counts: torch.Tensor | None = None) -> torch.Tensor:
    """Token probabilities after temperature, penalties (given the context's token counts), top-k and top-p."""
    return distribution(processed_logits(logits, cfg, counts), cfg)


@dataclass(frozen=True)
class TokenLogProb:
    """The log probability of one generated token, as TensorRT-LLM's sampling kernels report it.

    full: log p(token) under the softmax of the processed logits over the whole vocabulary (what cum_log_probs
        adds up). normalized: output_log_probs with normalize_log_probs: full minus the log of the top-k set's mass
        when top-k sampling (top_k > 0; greedy top_k 1 gives 0), else full (the top-p kernel does not normalise).
    """

    full: float
    normalized: float

    def reported(self, normalize: bool) -> float:
        return self.normalized if normalize else self.full


def log_prob(processed: torch.Tensor, token: int, cfg: SamplingConfig) -> TokenLogProb:
    """The log probability of `token` under processed logits [V] (see `TokenLogProb`)."""
    logp = torch.log_softmax(processed.double(), dim=-1)
    full = float(logp[token])
    if cfg.top_k > 0:
        k = min(cfg.top_k, logp.shape[-1])
        return TokenLogProb(full, full - float(torch.logsumexp(torch.topk(logp, k).values, dim=-1)))
    return TokenLogProb(full, full)


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


def residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """norm(max(0, p - q)): what to sample from after the target rejects a draft token.

    If p <= q everywhere (only possible when p == q, where rejection has probability 0) fall back to p.
    """
    r = torch.clamp(p - q, min=0.0)
    total = r.sum()
    if total <= 0:
        return p
    return r / total
