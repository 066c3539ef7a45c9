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
and when the deployment streams one response per step (the stream carries the same tokens), the steps are the
responses themselves (after the prefill's) and their sizes give the drafts accepted at each step. The BLS of
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


@dataclass
class AcceptanceRecord:
    """Speculation figures of one greedy request."""

    prompt_index: int
    output_tokens: int
    accepted_draft_tokens: int
    draft_tokens: int
    server_acceptance_rate: float | None
    steps: int
    acceptance_length: float
    accepted_per_step: list[int] | None = None  # from streamed chunk sizes (one response per step)
    prompt: str | None = None  # the prompt's id
    steps_from: str = "counters"  # stream (responses counted), counters (output - accepted - prefill)
    category: str | None = None  # the prompt's category (validation.prompts)
    prompt_tokens: int | None = None  # the prompt's length as sent (None without a client tokenizer)

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
        length is unknown. `stream`: the same request streamed, used for the steps when it carried the same
        tokens. `tokens`: the output length when the server sent no ids. `stream_steps`: without ids, count the
        steps from a matching stream. `stream_per_step` false: the deployment's responses are not one per step
        (the BLS streams one per round, and a round's target call decodes on after a partial acceptance), so the
        steps come from the counters whatever the stream holds."""
        if "total_accepted_draft_tokens" not in gen.perf or "total_draft_tokens" not in gen.perf:
            return None
        out = gen.num_tokens if gen.num_tokens is not None else tokens
        if out is None:
            return None
        accepted = int(gen.perf["total_accepted_draft_tokens"])
        drafted = int(gen.perf["total_draft_tokens"])
        per_step = None
        steps_from = "counters"
        if not stream_per_step:
            stream = None
        if (
            stream is not None
            and stream.ok
            and len(stream.chunks) > 1
            and gen.ids is not None
            and stream.ids == gen.ids
            and all(c.ids for c in stream.chunks)
        ):
            counted = stream.chunks if prefill_is_step else stream.chunks[1:]
            per_step = [len(c.ids) - 1 for c in counted]
            if int(stream.perf.get("total_accepted_draft_tokens", accepted)) != accepted:
                per_step = None  # the streamed run drafted otherwise (same tokens): its steps are not this request's
        if per_step is not None:
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
        )

    def to_dict(self) -> dict:
        return asdict(self)
