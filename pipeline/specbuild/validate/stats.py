"""Per-request figures (the first of three small pieces: stats -> aggregate -> report).

Latency follows GenAI-Perf (genai_perf/metrics/llm_metrics.py): TTFT = request sent -> first response; inter-token
latency = gap between consecutive responses divided by the tokens in the later response (so multi-token chunks
from accepted drafts are normalised); request latency = sent -> last response.

Acceptance per request comes from the server's `return_perf_metrics` outputs. A verification step (one target
forward that checks drafts) yields exactly one token of its own plus the drafts it accepted. The prefill's token
comes from no verification when the drafts come from the model itself (Medusa, EAGLE, lookahead: the runtime's
and vLLM's convention), while external drafts (draft-target, prompt lookup through the BLS) are verified from the
prefill on. So, from the server's counters:
    steps = output tokens - accepted draft tokens - (0 if the prefill is a step else 1)
and when the deployment streams one response per step (the stream carries the same tokens), the stream's responses,
read with their own counters (`steps_in_stream`), give the drafts accepted at each step: per-position acceptance
comes from them, whether or not the streamed run drafted as the counted one did, and AL's steps too where it did
(a response that carries several steps leaves its request out of per-position acceptance, never the others). The
BLS of
draft-target and prompt lookup streams one response per round instead, and a round's target call decodes on
after a partial acceptance (up to the round's K + 1 tokens): its steps always come from the counters. A contract
without token ids (llm-api: NVIDIA's model streams one response per LLM iteration) counts the steps from the
stream when its text equals the non-streamed text (`stream_steps`), without the per-step sizes. The mean
acceptance length is `specbuild.facts.metrics.mean_acceptance_length(accepted, steps)` (bonus token included).

`stream_acceptance_length` is the fallback for a server whose counters read zero (TensorRT-LLM <= 1.2.1 in the
PyTorch flow, NVIDIA/TensorRT-LLM PR #17082): AL = (output tokens - 1) / (streamed responses - 1), i.e. the tokens each
generation step produced, with no counter involved.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from specbuild.facts import metrics
from specbuild.validate.client import Generation


def chunk_token_counts(gen: Generation, counted: list[int] | None = None) -> list[int]:
    """Tokens in each streamed response: from the ids, else `counted` (the tokenizer's count per response), else 1
    per response."""
    if counted is not None and len(counted) == len(gen.chunks) and all(c.ids is None for c in gen.chunks):
        return list(counted)
    return [len(c.ids) if c.ids is not None else 1 for c in gen.chunks]


def stream_matches(gen: Generation, stream: Generation | None) -> bool:
    """The streamed request completed and carried the same text (and ids, where there are ids) as `gen`."""
    return (
        stream is not None
        and stream.ok
        and stream.final
        and len(stream.chunks) > 1
        and stream.text == gen.text
        and stream.ids == gen.ids
    )


def stream_acceptance_length(tokens: int, stream: Generation) -> tuple[int, float] | None:
    """(generation steps, AL) from a stream of one response per step: (tokens - 1) / (responses - 1)."""
    steps = len(stream.chunks) - 1
    if steps < 1 or tokens < 1:
        return None
    return steps, (tokens - 1) / steps


@dataclass
class RequestRecord:
    """Timing of one request of the performance sweep or the load check."""

    deployment: str
    concurrency: int
    prompt_index: int
    start: float
    end: float
    ok: bool
    error: str | None = None
    output_tokens: int = 0
    ttft_s: float | None = None
    itl_s: list[float] = field(default_factory=list)  # one value per token after the first response
    streamed: bool = False

    @classmethod
    def from_generation(
        cls,
        gen: Generation,
        deployment: str,
        concurrency: int,
        prompt_index: int,
        tokens: int | None = None,
        chunk_tokens: list[int] | None = None,
    ) -> "RequestRecord":
        """`tokens`: the output length when the server sent no ids (e.g. counted with the tokenizer);
        `chunk_tokens`: the same per streamed response."""
        rec = cls(deployment, concurrency, prompt_index, gen.start, gen.end, gen.ok, gen.error)
        if not gen.ok:
            return rec
        counts = chunk_token_counts(gen, chunk_tokens)
        n = gen.num_tokens if gen.num_tokens is not None else tokens
        rec.output_tokens = n if n is not None else sum(counts)
        rec.streamed = len(gen.chunks) > 1
        if gen.chunks:
            rec.ttft_s = gen.chunks[0].t - gen.start
            for prev, cur, n in zip(gen.chunks, gen.chunks[1:], counts[1:]):
                if n > 0:
                    rec.itl_s.extend([(cur.t - prev.t) / n] * n)
        return rec

    @property
    def latency_s(self) -> float:
        return self.end - self.start

    @property
    def user_tokens_per_s(self) -> float | None:
        """Output tokens after the first / duration of the generation phase (GenAI-Perf's per-user throughput)."""
        if self.ttft_s is None or self.output_tokens < 2:
            return None
        gen_phase = self.latency_s - self.ttft_s
        return (self.output_tokens - 1) / gen_phase if gen_phase > 0 else None


ACCEPTED = "total_accepted_draft_tokens"


def steps_in_stream(
    stream: Generation, prefill_is_step: bool, accepted: int | None = None
) -> tuple[list[int] | None, str]:
    """The drafts accepted at each verification step of a streamed request, from the stream alone, and how they
    were read — or None and why they cannot be. The deployment is meant to send one response per step, yet a
    response may carry several (stream_interval, or a server that merges the responses of a slow client) or fewer
    tokens than its step accepted (the last step cut short by max_tokens or a stop word). So:
    - where every response carries its own counters (total_accepted_draft_tokens so far), a response of n tokens
      whose counter grew by a holds n - a steps (less the prefill's token in the first response when the prefill
      is no step): one step accepted a; none is an empty (final) response; two or more are steps whose split is
      unknown; fewer tokens than a + 1 is a step cut short, the last response only;
    - else each response's tokens less one are its step's drafts, when they add up to the stream's own counter
      (`accepted` where the stream sent none)."""
    chunks = stream.chunks
    total = stream.perf.get(ACCEPTED, accepted)
    if all(c.perf is not None and ACCEPTED in c.perf for c in chunks if c.ids):
        per_step: list[int] = []
        before = 0
        last = max((i for i, c in enumerate(chunks) if c.ids), default=-1)
        for i, c in enumerate(chunks):
            n = len(c.ids or ())
            now = int(c.perf[ACCEPTED]) if c.perf is not None and ACCEPTED in c.perf else before
            grew, before = now - before, now
            steps = n - grew - (1 if i == 0 and not prefill_is_step else 0)
            if steps == 1 or (steps < 1 and i == last and n > 0 and grew > 0):
                per_step.append(grew)
            elif steps >= 2:
                return None, f"response {i + 1} carries {steps} steps ({n} tokens, {grew} drafts accepted)"
            elif steps < 0 or grew:
                return None, f"response {i + 1}: {n} tokens for {grew} drafts accepted"
        return per_step, "each response's own counters"
    counted = chunks if prefill_is_step else chunks[1:]
    per_step = [len(c.ids) - 1 for c in counted if c.ids]
    if total is not None and sum(per_step) != int(total):
        return None, (
            f"its responses hold {sum(per_step)} drafts beyond one token per response, its counters {int(total)} "
            "(responses carrying several steps, or a step cut short)"
        )
    return per_step, "response sizes"


@dataclass
class AcceptanceRecord:
    """Speculation figures of one greedy request. The counters (accepted, drafted) are the counted request's; the
    per-step sizes come from the same prompt streamed, read from that stream alone (`steps_in_stream`), so a streamed
    run that drafted otherwise (same tokens, other steps) still gives its steps to per-position acceptance, while
    the steps behind AL stay the counted request's."""

    prompt_index: int
    output_tokens: int
    accepted_draft_tokens: int
    draft_tokens: int
    server_acceptance_rate: float | None
    steps: int
    acceptance_length: float
    accepted_per_step: list[int] | None = None  # the streamed request's steps (steps_in_stream)
    prompt: str | None = None  # the prompt's id
    steps_from: str = "counters"  # stream (responses counted), counters (output - accepted - prefill)
    category: str | None = None  # the prompt's category (validation.prompts)
    prompt_tokens: int | None = None  # the prompt's length as sent (None without a client tokenizer)
    per_step_note: str | None = None  # why there are no per-step sizes, or where they came from when not the steps

    @classmethod
    def from_generation(
        cls,
        gen: Generation,
        prompt_index: int,
        stream: Generation | None = None,
        *,
        prefill_is_step: bool = False,
        prompt: str | None = None,
        tokens: int | None = None,
        stream_steps: bool = False,
        stream_per_step: bool = True,
    ) -> "AcceptanceRecord | None":
        """None when the server returned no acceptance outputs (return_perf_metrics unsupported) or the output
        length is unknown. `stream`: the same request streamed: its steps (`steps_in_stream`) give the
        per-step sizes, and the steps behind AL when that run accepted as many drafts as this one. `tokens`: the
        output length when the server sent no ids. `stream_steps`: without ids, count the steps from a matching
        stream. `stream_per_step` false: the deployment's responses are not one per step (the BLS streams one per
        round, and a round's target call decodes on after a partial acceptance), so the steps come from the
        counters whatever the stream holds."""
        if ACCEPTED not in gen.perf or "total_draft_tokens" not in gen.perf:
            return None
        out = gen.num_tokens if gen.num_tokens is not None else tokens
        if out is None:
            return None
        accepted = int(gen.perf[ACCEPTED])
        drafted = int(gen.perf["total_draft_tokens"])
        per_step, note = None, None
        steps_from = "counters"
        if not stream_per_step:
            stream = None
        if stream is None:
            note = "not streamed" if stream_per_step else "the deployment does not stream one response per step"
        elif gen.ids is None:
            note = "no token ids"
        elif not (stream.ok and len(stream.chunks) > 1):
            note = f"its stream failed: {stream.error}" if not stream.ok else "its stream sent one response"
        elif stream.ids != gen.ids:
            note = "its stream carried other tokens"
        else:
            per_step, how = steps_in_stream(stream, prefill_is_step, accepted)
            if per_step is None:
                note = how
            elif sum(per_step) != accepted:
                note = (
                    f"from its stream, which drafted otherwise ({sum(per_step)} drafts accepted in "
                    f"{len(per_step)} steps; this request {accepted}): AL counts this request's steps"
                )
        if per_step is not None and sum(per_step) == accepted:
            steps = len(per_step)
            steps_from = "stream"
        elif stream_steps and gen.ids is None and stream_matches(gen, stream):
            steps = len(stream.chunks) - (0 if prefill_is_step else 1)
            steps_from = "stream"
        else:
            steps = out - accepted - (0 if prefill_is_step else 1)
        steps = max(steps, 1) if out else 0
        return cls(
            prompt_index,
            out,
            accepted,
            drafted,
            gen.perf.get("acceptance_rate"),
            steps,
            metrics.mean_acceptance_length(accepted, steps),
            per_step,
            prompt,
            steps_from,
            per_step_note=note,
        )

    def to_dict(self) -> dict:
        return asdict(self)
