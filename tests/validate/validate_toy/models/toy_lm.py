"""A deterministic fake language model for the toy Triton repository (test fixture, numpy only).

Tokens are bytes: id = byte + 3 (0 pad, 1 bos, 2 eos). The "model" emits only the characters of ALPHABET; its
logits are a hash of the last three tokens. `speculate` plays a draft model that agrees with the target's greedy
choice about 70 % of the time, verified greedily as Medusa/EAGLE/draft-target do, so the emitted tokens equal
plain greedy decoding by construction while several tokens come per step.
"""

from __future__ import annotations

import numpy as np

ALPHABET = "abcdefghijklmnopqrstuvwxyz_ ()=:.,\n0123456789"
ALPHA_IDS = np.array([ord(c) + 3 for c in ALPHABET], dtype=np.int64)
OFFSET = 3
EOS = 2


def encode(data: bytes) -> list[int]:
    return [b + OFFSET for b in data]


def decode(ids) -> str:
    return bytes(int(i) - OFFSET for i in ids if OFFSET <= int(i) < 256 + OFFSET).decode("utf-8", errors="replace")


def _hash(context: list[int], salt: int = 0) -> int:
    a = context[-1] if context else 0
    b = context[-2] if len(context) > 1 else 0
    c = context[-3] if len(context) > 2 else 0
    return (a * 1000003 + b * 7919 + c * 131 + salt * 104729 + 12345) & 0xFFFFFFFF


def logits(context: list[int]) -> np.ndarray:
    """Peaked like a real model's: the top token has probability ~0.2-0.5 at temperature 1."""
    h = np.uint64(_hash(context) | 1)
    k = np.arange(1, len(ALPHABET) + 1, dtype=np.uint64)
    mixed = (k * h * np.uint64(2654435761)) % np.uint64(2**32)
    return 8.0 * (mixed.astype(np.float64) / 2**32) ** 4


def probabilities(context: list[int], temperature: float) -> np.ndarray:
    z = logits(context) / max(temperature, 1e-6)
    p = np.exp(z - z.max())
    return p / p.sum()


def greedy_next(context: list[int]) -> int:
    return int(ALPHA_IDS[int(np.argmax(logits(context)))])


def sample_next(context: list[int], temperature: float, rng: np.random.Generator) -> int:
    p = probabilities(context, temperature)
    return int(ALPHA_IDS[int(rng.choice(len(p), p=p))])


def speculative_sample(context: list[int], temperature: float, rng: np.random.Generator) -> int:
    """One token by speculative sampling with a one-token deterministic draft d (q = one-hot at d): accept d
    with probability p(d), else sample from the residual max(p - q, 0), i.e. p without d. Its distribution is p
    exactly (Leviathan et al.), though it consumes the random stream differently from `sample_next`."""
    p = probabilities(context, temperature)
    d = int(np.flatnonzero(ALPHA_IDS == draft(context, 1)[0])[0])
    if rng.random() < p[d]:
        return int(ALPHA_IDS[d])
    residual = p.copy()
    residual[d] = 0.0
    residual /= residual.sum()
    return int(ALPHA_IDS[int(rng.choice(len(p), p=residual))])


def draft(context: list[int], k: int) -> list[int]:
    """k draft tokens: the greedy token ~70 % of the time, else its neighbour in the alphabet."""
    out: list[int] = []
    ctx = list(context)
    for i in range(k):
        best = int(np.argmax(logits(ctx)))
        if _hash(ctx, salt=i + 1) % 10 >= 7:
            best = (best + 1) % len(ALPHABET)
        tok = int(ALPHA_IDS[best])
        out.append(tok)
        ctx.append(tok)
    return out


def speculate(context: list[int], k: int) -> tuple[list[int], int]:
    """One greedy speculative step: (emitted tokens = accepted drafts + the bonus token, accepted count)."""
    proposal = draft(context, k)
    ctx = list(context)
    emitted: list[int] = []
    for tok in proposal:
        target = greedy_next(ctx)
        if tok != target:
            emitted.append(target)
            return emitted, len(emitted) - 1
        emitted.append(tok)
        ctx.append(tok)
    emitted.append(greedy_next(ctx))
    return emitted, k
