"""The recipe's `adapt:` section: adapt the draft to the team's own traffic before the engines are built, and ship
the new head only when it measurably beats the old one (`specbuild adapt`, specbuild.adapt; docs/adapt.md).

`compile` runs it first when the section is there; `specbuild adapt` takes the same settings, each of which a
command-line option may override. Every field has a default: `adapt: {}` adapts on validation.prompts."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, model_validator

from specbuild.facts.bounds import PositiveFinite, PositiveInt32
from specbuild.section import Section

Share = Annotated[float, Field(gt=0.0, lt=1.0)]

# The defaults a team gets without tuning: measured on the base zoo (bench/adapt.py, bench/README.md "Adapting the
# draft"); a run ends at whichever of max_steps, max_minutes or early stopping comes first.
DEFAULT_MAX_STEPS = 600
DEFAULT_MAX_MINUTES = 12.0
MIN_GATED_RECORDS = 20  # a category with fewer records is reported but not gated


class AdaptSection(Section):
    """Adapt the draft (EAGLE-1/2 or EAGLE-3 head, Medusa heads, draft model) to your traffic: split each category
    of the traffic into train, dev and held-out parts, regenerate answers with the target, train from the current
    head, and ship the new head only when its acceptance on the held-out part is measurably higher."""

    traffic: Path | None = None
    """Your traffic (every format validation.prompts reads: .txt, .jsonl, .json of text, chat, ShareGPT or OpenAI
    request records with an optional category); default validation.prompts (or the bundled set)."""
    max_steps: Annotated[int, Field(ge=0, le=1_000_000)] = DEFAULT_MAX_STEPS
    """Optimizer steps at most (0: no training; the run then ends `not shipped`). The same traffic, seed and
    max_steps give the same head, bitwise on a CPU."""
    max_minutes: PositiveFinite = DEFAULT_MAX_MINUTES
    """Training time at most (the teacher pass and the gate's decoding come on top); a run stopped by it is said
    to be, since another machine would stop elsewhere."""
    seed: Annotated[int, Field(ge=0, le=2**31 - 1)] = 0
    """Seeds the split of the traffic and the training order."""
    held_out: Share = 0.3
    """Share of each category held out for the gate (never trained on)."""
    dev: Share = 0.1
    """Share of each category that decides early stopping (never trained on)."""
    max_category_drop: Annotated[float, Field(ge=0.0, allow_inf_nan=False)] = 0.05
    """No gated category (at least 20 records) may lose more acceptance length than this: the new head is refused
    when a category's paired 95% interval of (new - old) AL lies wholly below -max_category_drop."""
    max_tokens: PositiveInt32 | None = None
    """Tokens the target answers each prompt with (teacher pass and the gate's decoding); default
    validation.max_tokens, what the deployment is validated with. A request record's own max_tokens caps its
    training answer within it."""
    learning_rate: PositiveFinite | None = None
    """Peak learning rate (warm-up, then cosine decay to 10%); default: the head kind's own."""
    batch_size: PositiveInt32 | None = None
    """Teacher rows per optimizer step; default: the head kind's own."""
    eval_every: PositiveInt32 = 50
    """Steps between two measurements of the dev part (greedy chain acceptance of the head in training)."""
    patience: PositiveInt32 = 4
    """Early stopping: end after this many dev measurements without a better one; the best one is kept."""
    device: Annotated[str, Field(pattern=r"^(auto|cpu|cuda(:[0-9]+)?)$")] = "auto"
    """Where training runs: auto (cuda when torch sees a GPU, else cpu), cpu, cuda or cuda:N."""
    trainer: Literal["specbuild", "modelopt"] = "specbuild"
    """specbuild: the project's trainer (every head kind). modelopt: NVIDIA Model-Optimizer's EAGLE-3 training and
    export (nvidia-modelopt 0.47.0), run in its own virtual environment, which specbuild makes on first use in its
    cache dir (pip needs PyPI then) unless modelopt_python names one; EAGLE-3 heads only."""
    modelopt_python: Path | None = None
    """trainer: modelopt: the Python of a virtual environment already holding nvidia-modelopt[hf] (default: the one
    specbuild makes, $SPECBUILD_CACHE_DIR/modelopt/venv-*)."""

    @model_validator(mode="after")
    def _parts_leave_training_rows(self):
        if self.held_out + self.dev >= 1.0:
            raise ValueError(
                f"held_out {self.held_out} + dev {self.dev} leave no traffic to train on — keep their sum below 1 "
                "(e.g. held_out: 0.3, dev: 0.1)"
            )
        return self
