"""Decoding methods of the reference runtime: the `Decoder` every method's pack subclasses in its `decoder.py`
(specbuild/methods/<name>/decoder.py, named by the pack's `decoder` member and loaded through the registry), and the
executor's own two here (autoregressive.py: no speculation, and the baseline; external_drafts.py: drafts made
elsewhere, the Triton BLS path).

A method turns a batch of sequences into new tokens. It has two verbs:
    prefill(batch) -> list[StepOutput]   rows that just joined: fill the caches it needs, emit the first token(s)
    step(batch)    -> list[StepOutput]   one decode iteration (draft, verify, accept) for every row
Model plumbing (padding, masks, positions, cache compaction) lives in `Batch`, `CausalLM` and `KVCache`;
stop conditions, stats and batching live in the executor. See ../README.md.

Adaptive speculation: with a `draft_len_schedule` in the decoding options (specbuild/standalone/draft_len_schedule.py) the
executor calls `follow_load(requests in flight)` before each step, and a method drafts at most `capped(full)`
tokens that step (chains: drafts; Medusa and EAGLE-1/2 trees: nodes, the first N choices; EAGLE-3: its chain
length or tree depth); 0 is a plain decoding step, whose method state stays ready for when drafting resumes.

The acceptance-rate switch (decoding keys acceptance_rate_threshold / acceptance_rate_window_size,
speculation_gate.py): the executor hands every step's outputs to `record_acceptance`; once the gate disables, the
method's length is 0 for good, the same plain step.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Mapping

from specbuild.reference.decoder import speculation_gate
from specbuild.standalone import draft_len_schedule
from specbuild.facts.engine_facts import SpecMode
from specbuild.errors import UserError
from specbuild.methods import METHODS, load

if TYPE_CHECKING:
    from specbuild.reference.decoder.acceptance import Acceptance
    from specbuild.reference.decoder.batch import Batch
    from specbuild.reference.decoder.engine import Engine
    from specbuild.reference.decoder.sequence import Sequence

# The executor's own decoders (not methods of a recipe): name -> module here, whose DECODER is the class
OWN = ("autoregressive", "external_drafts")
# seq.state key: the extras (Decoder.prefix_extras) of the prefix KV reuse found for a newly admitted row
REUSED_EXTRAS = "reused_extras"


@dataclass
class StepOutput:
    """What one prefill/step produced for one row: the tokens (accepted drafts, then the correction or bonus
    token) and how many drafts were proposed and accepted. The executor applies stop conditions and may emit
    fewer tokens."""

    tokens: list[int]
    drafted: int = 0
    accepted: int = 0
    counts_as_step: bool = True  # False for a plain prefill (no verification happened)
    log_probs: list | None = None  # one sampling.TokenLogProb per token when the request asks for log probs

    @classmethod
    def of(cls, acceptance: "Acceptance", drafted: int) -> "StepOutput":
        """A verification's output: the accepted drafts and the bonus token (with their log probs if asked)."""
        log_probs = None if acceptance.log_probs is None else list(acceptance.log_probs)
        return cls(acceptance.new_tokens, drafted=drafted, accepted=len(acceptance.nodes), log_probs=log_probs)


def next_token(seq: "Sequence", logits, *, counts_as_step: bool = True) -> StepOutput:
    """One token from the logits [V] of the sequence's next position (the request's choice: greedy or a sample,
    given its context), with its log probability when the request asks for it."""
    token = seq.choose(logits)
    return StepOutput(
        [token], counts_as_step=counts_as_step, log_probs=seq.token_log_probs(logits[None], [token], [()])
    )


class Decoder:
    """A decoding method of the reference runtime (the recipe side of a method is `specbuild.methods.base.Method`).
    Subclasses set `name` and implement `prefill` and `step`."""

    name: ClassVar[str] = ""
    engine_mode: ClassVar[SpecMode]  # the speculative-decoding mode of the engine this method decodes with
    needs_draft_engine: ClassVar[bool] = False
    # Ids the draft engine's vocabulary may hold past the target's (PARD's mask token)
    draft_extra_ids: ClassVar[int] = 0
    # True: prefill works when the "target" cache already holds a prefix of the prompt (KV-cache reuse);
    # that holds for any prefill that brings caches up to date with `batch.feed`.
    reuses_prefix: ClassVar[bool] = False
    # False: the method has no draft length a schedule could scale (a draft_len_schedule is refused at load)
    follows_schedule: ClassVar[bool] = True
    # True: `step` brings every row's cache up to date whatever it lacks and `prefill` is the same forward, so an
    # admitted row with a short uncached tail (a reused prefix) can decode in the running batch's forward
    step_is_prefill: ClassVar[bool] = False
    # The method (name of a bound method) that does one step's drafting; its time is the step's t(draft) in the cost
    # model (reference/call_costs.py). None: the drafts come from lookups inside `step` (no drafting call).
    drafting: ClassVar[str | None] = None

    def __init__(self, engine: "Engine", draft_engine: "Engine | None" = None, decoding: Mapping | None = None):
        self.engine = engine
        self.target = engine.model
        self.draft_engine = draft_engine
        self.decoding = dict(engine.decoding if decoding is None else decoding)
        self.schedule = self._schedule()
        self.gate = self._gate()
        self.scheduled_length: int | None = None  # this step's draft length from the schedule (None: full)

    def _schedule(self) -> list[tuple[int, int]] | None:
        value = self.decoding.get(draft_len_schedule.PARAMETER)
        if value is None or value == "":
            return None
        where = self.where(draft_len_schedule.PARAMETER)
        try:
            points = draft_len_schedule.parse(value)
        except ValueError as exc:
            raise UserError(f"{where}={value!r}: {exc}") from None
        if not self.follows_schedule:
            raise UserError(
                f"{where}: {self.name} has no draft length to follow the load (its step is its whole "
                "window) — remove the schedule"
            )
        return points

    def _gate(self) -> speculation_gate.SpeculationGate | None:
        try:
            gate = speculation_gate.from_decoding(self.decoding, self.where())
        except ValueError as exc:
            raise UserError(str(exc)) from None
        if gate is not None and not self.follows_schedule:
            raise UserError(
                f"{self.where(speculation_gate.THRESHOLD)}: {self.name} has no draft length that could drop to 0 "
                "(its step is its whole window) — remove the acceptance-rate switch"
            )
        return gate

    @property
    def speculation_off(self) -> bool:
        """The acceptance-rate switch turned speculation off (for the rest of this executor's life)."""
        return self.gate is not None and self.gate.disabled

    def follow_load(self, requests: int) -> None:
        """This step's draft length from the schedule for `requests` in flight (the executor calls it); 0 for good
        once the acceptance-rate switch turned speculation off."""
        if self.speculation_off:
            self.scheduled_length = 0
            return
        self.scheduled_length = (
            None if self.schedule is None else draft_len_schedule.draft_length(self.schedule, requests)
        )

    def record_acceptance(self, outputs: "list[StepOutput]") -> bool:
        """One decoding iteration's outputs, for the acceptance-rate switch: a sample of the accepted over the
        drafted tokens of the rows that drafted (verification steps only). True when it switched speculation off."""
        if self.gate is None:
            return False
        drafting = [o for o in outputs if o.counts_as_step and o.drafted > 0]
        return self.gate.record(sum(o.accepted for o in drafting), sum(o.drafted for o in drafting))

    def capped(self, full: int) -> int:
        """`full` drafts (or tree nodes), cut to this step's scheduled length."""
        return full if self.scheduled_length is None else min(full, self.scheduled_length)

    # ---------------------------------------------------------------- KV reuse and joining the running batch
    def prefix_extras(self) -> tuple[str, ...]:
        """The names of the per-position state a reused prefix must bring besides the target's KV (`PrefixStore`
        extras, e.g. the target features an EAGLE head reads); the executor puts what it found, cut to the reused
        length, in `seq.state[REUSED_EXTRAS]` before `prefill` or `join`."""
        return ()

    def kept_extras(self, seq: "Sequence", length: int) -> dict:
        """That state for the first `length` positions of a row leaving the batch, kept beside its KV ({}: none,
        and then the entry cannot answer this method)."""
        return {}

    def joins_running_batch(self) -> bool:
        """Whether this step's forward can be the prefill of admitted rows with a short uncached tail (they join the
        running batch instead of a forward of their own): `step_is_prefill`, or as the method decides per step."""
        return self.step_is_prefill

    def join(self, batch: "Batch") -> None:
        """Ready admitted rows (their target cache in place) to decode in the running batch's next step: the
        method's other caches and per-sequence state. Default: nothing."""

    def prefill(self, batch: "Batch") -> list[StepOutput]:
        """Default: one target forward over each prompt; the first token comes from its last position."""
        out = batch.feed("target", self.target, logits="last")
        batch.caches["target"].commit_all()
        return [next_token(seq, out.logits[r], counts_as_step=False) for r, seq in enumerate(batch.seqs)]

    def step(self, batch: "Batch") -> list[StepOutput]:
        raise NotImplementedError

    # ---------------------------------------------------------------- helpers for subclasses
    def where(self, key: str | None = None) -> str:
        """Where a decoding option lives, for error messages: '<engine>/config.json: specbuild.decoding[.key]'."""
        return f"{self.engine.path}/config.json: specbuild.decoding" + (f".{key}" if key else "")

    def option(self, key: str, default=None, *, kind=int, minimum: int | None = None):
        """A value from the engine's `decoding` section, checked; errors name the engine folder and key."""
        value = self.decoding.get(key, default)
        if value is None:
            raise UserError(f"{self.where(key)} is required by {self.name}")
        try:
            value = kind(value)
        except (TypeError, ValueError) as exc:
            raise UserError(f"{self.where(key)}={value!r}: {exc}") from exc
        if minimum is not None and value < minimum:
            raise UserError(f"{self.where(key)}={value} must be >= {minimum}")
        return value


def method_class(name: str) -> type[Decoder]:
    """The decoder of a method by its recipe name (`none`, `draft_target`, `medusa`, ...: its pack's), or one of the
    executor's own (`autoregressive`, `external_drafts`). No speculation decodes autoregressively."""
    if name in OWN:
        return importlib.import_module(f"specbuild.reference.decoder.methods.{name}").DECODER
    pack = METHODS.get(name)
    if pack is None:
        raise UserError(f"the reference runtime has no decoding method {name!r}")
    if pack.decoder is None:
        if pack.Params is None:
            return method_class("autoregressive")
        raise UserError(f"the reference runtime has no decoding method {name!r}")
    return load(pack, pack.decoder)
