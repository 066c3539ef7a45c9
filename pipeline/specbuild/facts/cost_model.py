"""The cost model of speculative decoding: the speedup a method could reach on a machine, from its per-call costs.

A speculative step verifies its drafts in one target forward and yields AL tokens per request (bonus included);
an autoregressive step yields one token per request for one target forward. Counting only the calls they make,

    limit = AL x t(1) / (t(verify) + t(draft))

t(1): the target's forward in an autoregressive step, t(verify): its forward in a speculative step (the drafts
verified), t(draft): one step's drafting (draft-model forwards, head passes and the drafter's own work around them;
0 where drafts come from a lookup), all at the same number of requests decoding together. What a method measures
below its limit is the rest of its step (acceptance, cache commits, bookkeeping), prefills, and, served, whatever
the server adds to each step. The figures come from timers around the calls of real decoding
(`specbuild.reference.call_costs` for the reference runtime).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from specbuild.facts.metrics import mean_acceptance_length


@dataclass(frozen=True)
class StepCosts:
    """Mean per-step costs of one method decoding at one concurrency (milliseconds per step)."""

    steps: int  # decode steps timed (prefills excluded)
    rows: float  # requests per step, mean
    step_ms: float  # the whole step
    target_ms: float  # the target's forwards inside the step (autoregressive: t(1); speculative: t(verify))
    draft_ms: float  # the step's drafting call (0: none)
    accepted: int = 0  # draft tokens accepted over the requests' verification steps
    verifications: int = 0  # the requests' verification steps (a step of r requests counts r)

    @property
    def acceptance_length(self) -> float:
        """AL of these steps (bonus token included); 1.0 when nothing was verified."""
        return mean_acceptance_length(self.accepted, self.verifications) if self.verifications else 1.0

    def to_dict(self) -> dict:
        return {
            **{k: round(v, 4) if isinstance(v, float) else v for k, v in asdict(self).items()},
            "acceptance_length": round(self.acceptance_length, 3),
        }

    @staticmethod
    def pooled(parts: list["StepCosts"]) -> "StepCosts":
        """Several timings of the same thing as one (means weighted by their steps)."""
        parts = [p for p in parts if p.steps]
        n = sum(p.steps for p in parts)
        if not n:
            return StepCosts(0, 0.0, 0.0, 0.0, 0.0)

        def mean(field: str) -> float:
            return sum(getattr(p, field) * p.steps for p in parts) / n

        return StepCosts(
            n,
            mean("rows"),
            mean("step_ms"),
            mean("target_ms"),
            mean("draft_ms"),
            sum(p.accepted for p in parts),
            sum(p.verifications for p in parts),
        )


def limit(acceptance_length: float, t1_ms: float, verify_ms: float, draft_ms: float) -> float | None:
    """AL x t(1) / (t(verify) + t(draft)): the speedup the calls alone allow (None without a cost to divide by)."""
    spent = verify_ms + draft_ms
    return acceptance_length * t1_ms / spent if spent > 0 and t1_ms > 0 else None


@dataclass(frozen=True)
class LevelModel:
    """One concurrency level: the method's costs next to autoregressive decoding's, its limit, and the speedups
    measured in process (the same runs the costs come from) and served (None: not measured)."""

    concurrency: int
    baseline: StepCosts
    method: StepCosts
    in_process: float | None = None
    served: float | None = None

    @property
    def limit(self) -> float | None:
        return limit(
            self.method.acceptance_length, self.baseline.target_ms, self.method.target_ms, self.method.draft_ms
        )

    def share(self, measured: float | None) -> float | None:
        """measured / limit: how much of what the calls allow a deployment keeps."""
        return measured / self.limit if measured is not None and self.limit else None

    def to_dict(self) -> dict:
        def r(v):
            return None if v is None else round(v, 3)

        return {
            "concurrency": self.concurrency,
            "t1_ms": round(self.baseline.target_ms, 4),
            "verify_ms": round(self.method.target_ms, 4),
            "draft_ms": round(self.method.draft_ms, 4),
            "acceptance_length": round(self.method.acceptance_length, 3),
            "limit": r(self.limit),
            "in_process": r(self.in_process),
            "in_process_share_of_limit": r(self.share(self.in_process)),
            "served": r(self.served),
            "served_share_of_limit": r(self.share(self.served)),
            "baseline_step_ms": round(self.baseline.step_ms, 4),
            "method_step_ms": round(self.method.step_ms, 4),
            "steps": {"baseline": self.baseline.steps, "method": self.method.steps},
        }
