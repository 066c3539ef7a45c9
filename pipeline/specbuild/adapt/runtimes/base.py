"""What adapt asks of the recipe's runtime: decode the traffic with a head (the teacher pass and the gate), and the
target's hidden states over prompt + answer (what heads learn from).

    runtime = adapt_runtime(build, work)         # specbuild.adapt.runtimes: by the recipe's Runtime class
    decoded = runtime.decode(spec, prompts, max_tokens, end_id=2)   # one Decoded per prompt (token ids), in order
    decoded = runtime.decode(spec, prompts, 32, end_id=2, sampling=[TeacherSampling(...), None], limits=[16, 32])
    states = runtime.states(rows, layers)        # the target's final hidden states (+ captured layers) per row
    target = runtime.target_model()              # the target as a transformers module (embedding, lm_head)

A head is named by the speculation description whose params point at it (`with_head`), so the old and the new
head decode through exactly the code the deployment serves them with."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Protocol

from specbuild.adapt.sampling import TeacherSampling
from specbuild.speculation import Speculation

Progress = Callable[[str], None]


@dataclass
class Decoded:
    """One record decoded by the runtime (greedily unless sampling was asked): its answer and the speculation
    counters of that request."""

    output_ids: list[int]  # the answer (the end id not included)
    finish_reason: str
    draft_tokens: int
    accepted_draft_tokens: int
    steps: int  # verification steps (specbuild.metrics: AL = (accepted + steps) / steps)
    accepted_per_step: list[int] = field(default_factory=list)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclass
class States:
    """The target's hidden states over each row (prompt + answer), float32 on the CPU."""

    final: list  # [T, H] per row: after the final norm (what lm_head reads; EAGLE-1 and Medusa read it)
    captured: list | None = None  # [T, n x H] per row: the captured decoder layers' outputs (EAGLE-3)


class AdaptRuntime(Protocol):
    """The runtime side of adapt, one implementation per runtime package's Runtime class."""

    description: str  # for reports: "the reference runtime (CPU, engine folders)"

    def decode(
        self,
        spec: Speculation,
        prompts: list[list[int]],
        max_tokens: int,
        *,
        end_id: int | None,
        pad_id: int | None = None,
        progress: Progress | None = None,
        sampling: list[TeacherSampling | None] | None = None,  # per prompt; None / absent: greedy
        limits: list[int] | None = None,  # per prompt: answer tokens at most (<= max_tokens); absent: max_tokens
    ) -> list[Decoded]: ...

    def states(self, rows: list[list[int]], layers: tuple[int, ...] | None) -> States: ...

    def target_model(self): ...

    def close(self) -> None: ...


def with_head(spec: Speculation, head: Path) -> Speculation:
    """The same speculation with its head (or draft model) at `head`."""
    return dataclasses.replace(spec, params=dataclasses.replace(spec.params, path=Path(head)))
