"""Spike and recovery: a deployment whose adaptive.draft_len_schedule turns drafting off at some number of requests
in flight must draft as well as before once the load is gone. TensorRT-LLM's drafter takes the draft length of the
largest schedule key <= the batch size (`Drafter.get_draft_len_for_batch_size`, llm_args.py
`DecodingBaseConfig.draft_len_schedule`, 1.2); a drafter that keeps state across steps can come back from a length of
0 with drafting off or with stale drafts, and nothing errors: only acceptance shows it.

The check (run for recipes whose schedule reaches 0; skipped otherwise, with the reason):
1. pre-spike: the first `validation.spike.prompts` prompts, one request at a time (greedy), their acceptance
   pooled per verification step (AL, bonus token included) with the suite's bootstrap interval over the requests;
2. spike: `validation.spike.requests` requests with `validation.spike.concurrency` in flight (default twice the
   schedule's off point, at most build.max_batch_size): the schedule turns drafting off, so the draft tokens per
   verification step there should be about 0 (a warning when they are not, for the spike then did not test what it
   should);
3. recovery: the pre-spike prompts again, in the same order, one request at a time, judged after each request over
   the window of the last `prompts` requests (the same prompts as before the spike): acceptance is back when the
   window's interval reaches the pre-spike interval (or, when the recipe sets `validation.spike.max_acceptance_drop`,
   when the window's AL is at least (1 - drop) x the pre-spike AL). Failed when no window within
   `validation.spike.recovery_requests` requests is back.

The report says the pre-spike AL, the AL and draft tokens per step during the spike, the recovery AL and how many
requests after the spike recovery took (the requests before the first window that was back, plus that window)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from specbuild.recipe.adaptive import off_point
from specbuild.validate.aggregate import CONFIDENCE, GroupAcceptance, group_acceptance
from specbuild.validate.checks.acceptance import PREFILL_IS_STEP, ZERO_COUNTERS
from specbuild.validate.checks.base import FAILED, PASSED, SKIPPED, WARNED, CheckResult, SuiteContext, timed
from specbuild.validate.stats import AcceptanceRecord

if TYPE_CHECKING:
    from specbuild.recipe.prompts import Prompt
    from specbuild.validate.client import Generation

NAME, TITLE = "spike_recovery", "Spike and recovery (drafting comes back after the schedule turned it off)"
# the spike "turned drafting off" when its draft tokens per verification step stay below this share of the
# pre-spike ones (closed-loop clients leave a step or two with fewer requests in flight between their requests)
OFF_SHARE = 0.5


def spike_concurrency(configured: int | None, off: int, max_batch_size: int) -> int:
    """Requests in flight during the spike: the recipe's, else twice the off point within max_batch_size."""
    if configured is not None:
        return configured
    return max(off, min(max_batch_size, 2 * off))


def recovered(window: GroupAcceptance, before: GroupAcceptance, max_drop: float | None) -> bool:
    """Whether a recovery window's acceptance is back to the pre-spike one: its interval reaches the pre-spike
    interval, or (a tolerance set) its AL is at least (1 - max_drop) x the pre-spike AL."""
    if max_drop is not None:
        return window.acceptance_length.value >= (1.0 - max_drop) * before.acceptance_length.value
    return window.acceptance_length.high >= before.acceptance_length.low


def drafts_per_step(group: GroupAcceptance) -> float:
    return group.draft_tokens / group.steps if group.steps else 0.0


def _al_text(group: GroupAcceptance) -> str:
    al = group.acceptance_length
    return f"{al.value:.2f} [{al.low:.2f}–{al.high:.2f}]"


class _Requests:
    """Greedy requests to the target, each turned into its acceptance record; the first failure is kept."""

    def __init__(self, ctx: SuiteContext):
        self.ctx = ctx
        self.params = ctx.greedy_params()
        self.prefill_is_step = PREFILL_IS_STEP[ctx.target.contract.name](ctx.spec)
        self.failures: list[str] = []
        self.missing = 0  # answered without acceptance outputs

    def send(self, prompt: Prompt) -> Generation:
        return self.ctx.target.generate(prompt.text, self.params, "http")

    def record(self, prompt: Prompt, gen: Generation) -> AcceptanceRecord | None:
        if not gen.ok:
            self.failures.append(f"{prompt.id}: {gen.error}")
            return None
        rec = AcceptanceRecord.from_generation(
            gen,
            prompt.index,
            None,
            prefill_is_step=self.prefill_is_step,
            prompt=prompt.id,
            tokens=self.ctx.count_tokens(gen),
        )
        if rec is None:
            self.missing += 1
            return None
        return replace(rec, category=prompt.category)

    def one_at_a_time(self, stage: str, prompts: list[Prompt]) -> list[AcceptanceRecord]:
        out = []
        for i, p in enumerate(prompts):
            self.ctx.progress(stage, i, len(prompts))
            rec = self.record(p, self.send(p))
            if rec is not None:
                out.append(rec)
        self.ctx.progress(stage, len(prompts), len(prompts))
        return out

    def in_flight(self, stage: str, prompts: list[Prompt], concurrency: int) -> list[AcceptanceRecord]:
        jobs = [lambda p=p: (p, self.send(p)) for p in prompts]
        records = [self.record(p, g) for p, g in self.ctx.run_many(stage, jobs, parallel=concurrency)]
        return [r for r in records if r is not None]


def _skip(ctx: SuiteContext) -> str | None:
    """Why the check does not apply to this recipe (None: it does)."""
    points = ctx.spec.draft_len_schedule
    if not ctx.spec.speculative:
        return "no speculation"
    if not points:
        return "no adaptive.draft_len_schedule: the draft length is fixed, drafting is never turned off"
    off = off_point(points)
    if off is None:
        schedule = ", ".join(f"{b}: {n}" for b, n in points)
        return f"adaptive.draft_len_schedule {{{schedule}}} never turns drafting off (no draft length 0)"
    max_batch = ctx.recipe.build.max_batch_size
    if off > max_batch:
        return (
            f"adaptive.draft_len_schedule turns drafting off at {off} requests in flight, above "
            f"build.max_batch_size {max_batch}: the server never gets there"
        )
    if len(ctx.prompts) < 2:
        return "fewer than 2 prompts in the prompt set: pre-spike acceptance needs an interval over requests"
    return None


@timed
def run(ctx: SuiteContext) -> CheckResult:
    why = _skip(ctx)
    if why is not None:
        return CheckResult(NAME, TITLE, SKIPPED, why)
    settings = ctx.recipe.validation.spike
    points = list(ctx.spec.draft_len_schedule)
    off = off_point(points)
    concurrency = spike_concurrency(settings.concurrency, off, ctx.recipe.build.max_batch_size)
    n = min(settings.prompts, len(ctx.prompts))
    bound = max(settings.recovery_requests, n)  # at least one window
    gate = (
        f"acceptance back to its pre-spike value within {bound} requests after "
        f"{concurrency} in flight (drafting off from {off})"
    )
    if concurrency < off:
        return CheckResult(
            NAME,
            TITLE,
            SKIPPED,
            f"validation.spike.concurrency {concurrency} is below the "
            f"schedule's off point {off}: no spike — set it to at least {off}",
            gate=gate,
        )
    chosen = ctx.prompts[:n]
    spike_prompts = [ctx.prompts[i % len(ctx.prompts)] for i in range(max(settings.requests, concurrency))]
    requests = _Requests(ctx)
    details: dict = {
        "schedule": {str(b): d for b, d in points},
        "off_point": off,
        "spike_concurrency": concurrency,
        "prompts": [p.id for p in chosen],
        "recovery_bound": bound,
        "max_acceptance_drop": settings.max_acceptance_drop,
        "judged": "AL within max_acceptance_drop of the pre-spike AL"
        if settings.max_acceptance_drop is not None
        else f"a window's {CONFIDENCE:.0%} bootstrap interval reaches the pre-spike interval",
    }

    pre = requests.one_at_a_time("spike: before, concurrency 1", chosen)
    if requests.failures or len(pre) < n:
        return _unmeasured(requests, "before the spike", details, gate)
    before = group_acceptance("before the spike", pre)
    details["before"] = before.to_dict()
    if before.draft_tokens == 0:
        if ctx.target.contract.counters_may_read_zero:
            return CheckResult(
                NAME,
                TITLE,
                SKIPPED,
                f"{ZERO_COUNTERS}: acceptance cannot be followed request by request",
                details,
                gate,
            )
        return CheckResult(
            NAME,
            TITLE,
            FAILED,
            "no draft tokens at concurrency 1 before the spike: the deployment "
            "does not speculate there (the schedule's batch size 1 drafts "
            f"{points[0][1]})",
            details,
            gate,
        )

    during = requests.in_flight(f"spike: {concurrency} in flight", spike_prompts, concurrency)
    if requests.failures or not during:
        return _unmeasured(requests, f"during the spike ({concurrency} in flight)", details, gate)
    spike = group_acceptance("during the spike", during)
    details["spike"] = {**spike.to_dict(), "draft_tokens_per_step": drafts_per_step(spike)}

    windows, after = [], []
    back_at = None
    for i in range(bound):
        ctx.progress("spike: after, concurrency 1", i, bound)
        p = chosen[i % n]
        rec = requests.record(p, requests.send(p))
        if rec is None:
            return _unmeasured(requests, "after the spike", details, gate)
        after.append(rec)
        if len(after) >= n:
            window = group_acceptance(f"requests {len(after) - n + 1}-{len(after)} after the spike", after[-n:])
            windows.append(window.to_dict())
            if recovered(window, before, settings.max_acceptance_drop):
                back_at = len(after)
                break
    details["recovery_windows"] = windows
    details["recovery_requests"] = back_at
    last = windows[-1]
    details["recovery"] = last
    al_last = last["acceptance_length"]
    figures = (
        f"before the spike AL {_al_text(before)}; during the spike ({concurrency} in flight, "
        f"{len(during)} requests) AL {_al_text(spike)} with {drafts_per_step(spike):.2f} draft tokens per step "
        f"(before: {drafts_per_step(before):.2f})"
    )
    if back_at is None:
        drafted = sum(r.draft_tokens for r in after)
        how = (
            "drafting did not resume (0 draft tokens)"
            if drafted == 0
            else f"{drafted} draft tokens over {sum(r.steps for r in after)} steps"
        )
        return CheckResult(
            NAME,
            TITLE,
            FAILED,
            f"acceptance did not come back within {bound} requests at concurrency "
            f"1 after the spike: the last {n} read AL {al_last['value']:.2f} "
            f"[{al_last['low']:.2f}–{al_last['high']:.2f}], {how} — {figures}. The drafter keeps "
            "state across a draft length of 0 (TensorRT-LLM's draft_len_schedule going to 0 and back)",
            details,
            gate,
        )
    summary = (
        f"{figures}; after it AL {al_last['value']:.2f} [{al_last['low']:.2f}–{al_last['high']:.2f}] "
        f"within {back_at} requests at concurrency 1"
    )
    if drafts_per_step(spike) >= OFF_SHARE * drafts_per_step(before):
        return CheckResult(
            NAME,
            TITLE,
            WARNED,
            f"the spike did not turn drafting off (is the server following "
            f"draft_len_schedule? recovery was not tested after an off period) — {summary}",
            details,
            gate,
        )
    return CheckResult(NAME, TITLE, PASSED, summary, details, gate)


def _unmeasured(requests: _Requests, when: str, details: dict, gate: str) -> CheckResult:
    """A phase whose requests failed or came back without acceptance outputs."""
    if requests.failures:
        return CheckResult(
            NAME,
            TITLE,
            FAILED,
            f"{len(requests.failures)} request(s) failed {when}: {requests.failures[0]}",
            details,
            gate,
        )
    return CheckResult(
        NAME,
        TITLE,
        SKIPPED,
        f"the server returned no acceptance outputs {when} "
        "(return_perf_metrics: total_accepted_draft_tokens, total_draft_tokens)",
        details,
        gate,
    )
