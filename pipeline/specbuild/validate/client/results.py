"""What a generate call asks for (`GenerateParams`, contract-neutral) and what came back (`Generation`, `Chunk`),
with client-side times (time.perf_counter) for the metrics."""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from typing import Any

_request_counter = itertools.count()


def new_request_id(prefix: str = "sb") -> str:
    return f"{prefix}-{next(_request_counter)}-{time.monotonic_ns() % 10**9}"


@dataclass
class GenerateParams:
    """One generate request's inputs besides the prompt, in the suite's words; a contract
    (specbuild.validate.client.contracts) turns them into the served model's tensors. temperature None means
    greedy (top_k 1)."""

    max_tokens: int
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    seed: int | None = None
    stop_words: list[str] | None = None
    exclude_input_in_output: bool | None = True
    return_perf_metrics: bool = True
    extra: dict[str, Any] = field(default_factory=dict)  # further inputs by tensor name (used by bad-input cases)

    @property
    def greedy(self) -> bool:
        return self.temperature is None


@dataclass
class Chunk:
    """One streamed response: arrival time (perf_counter seconds), its text (new text only, also for a contract
    that streams cumulative text), token ids and its own perf values (the speculative counters so far, where the
    server sends them on every response: they say how many verification steps the response carries)."""

    t: float
    text: str
    ids: list[int] | None
    perf: dict[str, float] | None = None


@dataclass
class Generation:
    """The outcome of one generate call, successful or not. `text` is the whole text (the concatenated deltas, or
    the last cumulative text)."""

    protocol: str  # http | http-stream | grpc-stream
    start: float
    end: float = 0.0
    text: str = ""
    ids: list[int] | None = None
    perf: dict[str, float] = field(default_factory=dict)
    chunks: list[Chunk] = field(default_factory=list)
    error: str | None = None
    status: int | None = None  # HTTP status, when HTTP
    request_id: str | None = None
    final: bool = False  # the stream ended with its final response (or the unary call returned)
    note: str | None = None  # what a probe could not judge about this outcome, for the report

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def latency(self) -> float:
        return self.end - self.start

    @property
    def num_tokens(self) -> int | None:
        if self.ids is not None:
            return len(self.ids)
        n = self.perf.get("num_output_tokens")
        return int(n) if n is not None else None


@dataclass(frozen=True)
class Output:
    """One response, parsed: its text (as sent: a delta or the cumulative text), ids and perf values."""

    text: str
    ids: list[int] | None
    perf: dict[str, float]


# --- value conversion -----------------------------------------------------------------------------------------


def flatten(value: Any) -> list:
    if isinstance(value, list):
        return [x for v in value for x in flatten(v)]
    return [value]


def first(value: Any) -> Any:
    flat = flatten(value)
    return flat[0] if flat else None


def as_text(value: Any) -> str:
    if value is None:
        return ""
    v = first(value)
    if v is None:
        return ""
    return v.decode("utf-8", errors="replace") if isinstance(v, bytes) else str(v)


def as_ids(value: Any) -> list[int] | None:
    """Token ids of beam 0; -1 is padding (rows of a [beams, tokens] output are right-padded with -1)."""
    if value is None:
        return None
    return [int(x) for x in flatten(value) if int(x) >= 0]


def as_number(value: Any) -> float | None:
    """A number sent as a number or as a BYTES string ("0.5", "76735247746000"); None for "None" and the like."""
    v = first(value)
    if isinstance(v, bytes):
        v = v.decode("utf-8", errors="replace")
    try:
        return float(v) if v is not None else None
    except (TypeError, ValueError):
        return None
