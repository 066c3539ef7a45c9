"""How the target answers a training prompt in the teacher pass: on policy, the way production asked it.

    sampling, limit = teacher_sampling(record, seed=settings.seed, max_tokens=max_tokens)

- A record that gives no decoding setting (text, chat and ShareGPT records; a request without temperature, top_p,
  top_k or a penalty) is answered greedily, as `validate` asks.
- A request record that gives one is answered with its settings, the ones it leaves out at the OpenAI API's
  defaults (temperature 1, top_p 1, no top-k, no penalties): what an OpenAI-compatible server (trtllm-serve, Triton's
  OpenAI frontend) did with that request. temperature 0 or top_k 1 is greedy.
- Seeded: the request's own `seed`, else one derived from adapt.seed and the record's digest, so that a rerun draws
  the same tokens (bitwise, on the same machine) and two records never share a stream.
- Its `max_tokens` (or `max_completion_tokens`) caps the answer, within adapt.max_tokens.
- `stop` sequences, `n`, `logprobs` and tools are not replayed (the answer runs to the end id or the limit).

Only the train and dev parts are answered this way. The held-out part, which the gate decodes with the old and the
new head, stays greedy: speculative decoding is lossless under greedy decoding token for token, so both heads must
give the same answer and the acceptance difference is the heads' alone; under sampling each head's answer is one
draw of the same distribution, acceptance varies with the draw, and the token-for-token lossless check has nothing
to compare (docs/adapt.md)."""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass

from specbuild.recipe.prompt_records import RequestSampling

DECODING = ("temperature", "top_p", "top_k", "presence_penalty", "frequency_penalty", "repetition_penalty")


@dataclass(frozen=True)
class TeacherSampling:
    """Sampling settings of one teacher request (None where the request is greedy)."""

    temperature: float
    top_p: float
    top_k: int  # 0: off
    seed: int
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0

    def to_dict(self) -> dict:
        return asdict(self)


def derived_seed(seed: int, digest: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{seed}:{digest}".encode()).digest()[:4], "big") & 0x7FFFFFFF


def teacher_sampling(
    request: RequestSampling | None, digest: str, *, seed: int, max_tokens: int
) -> tuple[TeacherSampling | None, int]:
    """(sampling or None for greedy, answer tokens at most) for a record with `request` settings and `digest`."""
    if request is None:
        return None, max_tokens
    given = request.given
    limit = min(max_tokens, request.max_completion_tokens or request.max_tokens or max_tokens)
    if not any(k in given for k in DECODING):
        return None, limit
    temperature = 1.0 if request.temperature is None else request.temperature
    top_k = max(request.top_k or 0, 0)
    if temperature == 0.0 or top_k == 1:
        return None, limit
    sampling = TeacherSampling(
        temperature=temperature,
        top_p=1.0 if request.top_p in (None, 0.0) else request.top_p,
        top_k=top_k,
        seed=request.seed if request.seed is not None else derived_seed(seed, digest),
        presence_penalty=request.presence_penalty or 0.0,
        frequency_penalty=request.frequency_penalty or 0.0,
        repetition_penalty=request.repetition_penalty or 1.0,
    )
    return sampling, limit
