"""Auto-disable: a deployment whose recipe sets adaptive.disable_below {acceptance_rate: R, window: N} must switch
speculation off for good on traffic where acceptance is poor, and then serve no slower than its baseline.

TensorRT-LLM's switch (acceptance_rate_threshold / acceptance_rate_window_size, tensorrt_llm/llmapi/llm_args.py
@0004396; the reference runtime's reference/decoder/speculation_gate.py) averages one acceptance rate per
speculating iteration over the last N such iterations, and once that average is below R speculation stays off in
that server process until it restarts. Nothing reports the switch itself: the check sees it in the drafts.

Run last (it leaves the target without speculation), for recipes with adaptive.disable_below (skipped otherwise):
1. before: the greedy prompt set (the pass the earlier checks made, else one now) must draft, or there is nothing to
   switch off;
2. poor traffic: hot requests (temperature HOT_TEMPERATURE over the whole vocabulary, a seed each), one at a time,
   on which greedy drafts are rarely the sampled token, until the server drafted at least N x K tokens (so at least
   N speculating iterations of K drafts or fewer have been judged), or STALLED requests in a row drafted nothing, or
   a bound on the requests; when fewer than N x K tokens were drafted and drafting went on, the window may not have
   filled: a warning says the switch was not tested;
3. after: the greedy prompt set again, as fresh requests: none may draft (their total_draft_tokens), and the
   server's own draft counters (specbuild_spec_decode_num_draft_tokens_total, when it exports them) must not grow;
4. no slower: the target and the baseline take turns (ABBA) over the prompt set at concurrency 1 for
   validation.performance_rounds rounds, as the performance sweep does; each round gives one speedup (tokens/s
   ratio). Failed when every round is more than SLOWER_MARGIN slower than the baseline, inconclusive when the rounds
   disagree about it (the median below, some round above), passed otherwise.

Failed too when the hot traffic's acceptance rate was below R and drafting still went on afterwards (a switch that
never turns off). When the hot traffic's rate was not below R the switch had no reason to fire: a warning says the
check could not test it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from specbuild.validate.aggregate import Speedup, round_speedups, tokens_per_s
from specbuild.validate.checks.acceptance import PREFILL_IS_STEP
from specbuild.validate.checks.base import (
    FAILED,
    INCONCLUSIVE,
    PASSED,
    SKIPPED,
    WARNED,
    CheckResult,
    SuiteContext,
    timed,
)
from specbuild.validate.checks.performance import round_order, run_level
from specbuild.validate.client import GenerateParams
from specbuild.validate.report.markdown import speedup_text
from specbuild.validate.server_metrics import SpecCounts
from specbuild.validate.stats import AcceptanceRecord

if TYPE_CHECKING:
    from specbuild.speculation import DisableBelow
    from specbuild.validate.client import Generation

NAME, TITLE = "auto_disable", "Auto-disable (speculation switches itself off on poor acceptance)"
HOT_TEMPERATURE = 2.0  # sampled tokens a greedy drafter rarely guesses: acceptance far below any useful R
STALLED = 3  # hot requests in a row without a draft end the poor-traffic phase (drafting stopped, or never starts)
MAX_HOT_REQUESTS = 512
SLOWER_MARGIN = 0.1  # "no slower": failed only when every round is more than 10% slower than the baseline


@dataclass
class Phase:
    """Requests of one phase: their draft counts, summed."""

    requests: int = 0
    draft_tokens: int = 0
    accepted: int = 0
    drafting_requests: int = 0
    failures: int = 0
    first_failure: str | None = None
    missing: int = 0  # answered without acceptance outputs

    def add(self, record: AcceptanceRecord | None, gen: Generation) -> None:
        self.requests += 1
        if not gen.ok:
            self.failures += 1
            self.first_failure = self.first_failure or gen.error
            return
        if record is None:
            self.missing += 1
            return
        self.draft_tokens += record.draft_tokens
        self.accepted += record.accepted_draft_tokens
        self.drafting_requests += record.draft_tokens > 0

    @property
    def rate(self) -> float | None:
        return self.accepted / self.draft_tokens if self.draft_tokens else None

    def to_dict(self) -> dict:
        return {
            "requests": self.requests,
            "draft_tokens": self.draft_tokens,
            "accepted_draft_tokens": self.accepted,
            "acceptance_rate": self.rate,
            "requests_that_drafted": self.drafting_requests,
            "failed": self.failures,
            "without_acceptance_outputs": self.missing,
        }


def hot_bound(gate: DisableBelow, full_draft_length: int, max_tokens: int) -> tuple[int, int]:
    """(draft tokens after which at least `window` speculating iterations were judged, most hot requests to send):
    an iteration drafts at most K tokens, so N x K drafted tokens took at least N iterations; a request runs at most
    max_tokens iterations."""
    tokens = gate.window * max(1, full_draft_length)
    requests = min(MAX_HOT_REQUESTS, 4 * math.ceil(gate.window / max(1, max_tokens)) + 8)
    return tokens, requests


def switch_verdict(
    gate: DisableBelow, before: Phase, hot: Phase, after: Phase, server_after: SpecCounts | None, tokens_bound: int
) -> tuple[str, str]:
    """(status, sentence) of the switch: did drafting stop after poor traffic, and stay stopped. `tokens_bound`: the
    draft tokens after which the window was surely judged (hot_bound)."""
    server_drafts = server_after.draft_tokens if server_after is not None else None
    rate = hot.rate
    rate_text = "no drafts" if rate is None else f"acceptance rate {rate:.3f}"
    if after.draft_tokens == 0 and not server_drafts:
        counters = "" if server_after is None else " and the server's draft counters did not move"
        when = (
            f"after {hot.requests} hot ones ({rate_text}, below {gate.acceptance_rate})"
            if hot.draft_tokens
            else f"after traffic that already switched it off (the {hot.requests} hot requests drafted nothing)"
        )
        return PASSED, (
            f"speculation switched off: {after.requests} greedy requests {when} drafted nothing{counters}, where "
            f"{before.drafting_requests} of {before.requests} drafted before"
        )
    drafted = after.draft_tokens if after.draft_tokens else server_drafts
    if hot.draft_tokens < tokens_bound:
        return WARNED, (
            f"the hot traffic drafted {hot.draft_tokens} tokens in {hot.requests} requests, fewer than "
            f"window x K = {tokens_bound}: the window may not have filled, so the switch was not tested ({drafted} "
            "draft tokens afterwards) — a method that rarely drafts on unpredictable text (prompt lookup) needs a "
            "smaller adaptive.disable_below.window to be tested here"
        )
    if rate is not None and rate >= gate.acceptance_rate:
        return WARNED, (
            f"the hot traffic's {rate_text} was not below adaptive.disable_below.acceptance_rate "
            f"{gate.acceptance_rate}: the switch had no reason to fire, so it was not tested ({drafted} draft tokens "
            "afterwards)"
        )
    return FAILED, (
        f"speculation did not switch off: after {hot.requests} hot requests ({rate_text}, below "
        f"{gate.acceptance_rate} over at least {gate.window} speculating iterations) the greedy prompt set still "
        f"drafted {drafted} tokens — the server does not follow adaptive.disable_below (is "
        "acceptance_rate_threshold / acceptance_rate_window_size in its speculative_config?)"
    )


def slower_verdict(point: Speedup | None, margin: float = SLOWER_MARGIN) -> tuple[str, str]:
    """(status, sentence): is the switched-off deployment no slower than the baseline, judged on the rounds."""
    if point is None or point.value is None:
        return FAILED, "no speedup measured after the switch"
    floor = 1.0 - margin
    spread = f"{speedup_text(point.value)} (rounds {speedup_text(point.low)}–{speedup_text(point.high)})"
    if point.high < floor:
        return FAILED, (
            f"slower than the baseline after the switch: speedup {spread}, every round below {floor:.2f} — the "
            "switched-off deployment still pays for speculation (a drafter that keeps running?)"
        )
    if point.value < floor:
        return INCONCLUSIVE, (
            f"inconclusive: the rounds disagree about the switched-off deployment being no slower than the "
            f"baseline (speedup {spread}, limit {floor:.2f}) — rerun on a quiet machine, raise "
            "validation.performance_rounds, or set validation.allow_inconclusive"
        )
    return PASSED, f"no slower than the baseline after the switch: speedup {spread}"


class _Sender:
    def __init__(self, ctx: SuiteContext):
        self.ctx = ctx
        self.prefill_is_step = PREFILL_IS_STEP[ctx.target.contract.name](ctx.spec)

    def record(self, prompt, gen: Generation) -> AcceptanceRecord | None:
        if not gen.ok:
            return None
        return AcceptanceRecord.from_generation(
            gen,
            prompt.index,
            None,
            prefill_is_step=self.prefill_is_step,
            prompt=prompt.id,
            tokens=self.ctx.count_tokens(gen),
        )

    def greedy_phase(self, stage: str, generations: list[Generation] | None = None) -> Phase:
        """The prompt set greedily, one at a time (or records of an earlier pass)."""
        phase = Phase()
        params = self.ctx.greedy_params()
        for i, prompt in enumerate(self.ctx.prompts):
            self.ctx.progress(stage, i, len(self.ctx.prompts))
            gen = generations[i] if generations is not None else self.ctx.target.generate(prompt.text, params, "http")
            phase.add(self.record(prompt, gen), gen)
        self.ctx.progress(stage, len(self.ctx.prompts), len(self.ctx.prompts))
        return phase

    def hot_phase(self, tokens_bound: int, requests_bound: int) -> Phase:
        phase, quiet = Phase(), 0
        while phase.requests < requests_bound and phase.draft_tokens < tokens_bound and quiet < STALLED:
            i = phase.requests
            prompt = self.ctx.prompts[i % len(self.ctx.prompts)]
            params = GenerateParams(max_tokens=self.ctx.max_tokens, temperature=HOT_TEMPERATURE, top_k=0, seed=i + 1)
            self.ctx.progress("auto-disable: poor traffic (hot sampling)", i, requests_bound)
            gen = self.ctx.target.generate(prompt.text, params, "http")
            record = self.record(prompt, gen)
            phase.add(record, gen)
            quiet = quiet + 1 if record is not None and record.draft_tokens == 0 else 0
            if not gen.ok:
                break
        return phase


def _skip(ctx: SuiteContext) -> str | None:
    if not ctx.spec.speculative:
        return "no speculation"
    if ctx.spec.disable_below is None:
        return "no adaptive.disable_below: speculation never switches itself off"
    return None


@timed
def run(ctx: SuiteContext) -> CheckResult:
    why = _skip(ctx)
    if why is not None:
        return CheckResult(NAME, TITLE, SKIPPED, why)
    gate = ctx.spec.disable_below
    gate_text = (
        f"speculation off for good after poor acceptance (rate below {gate.acceptance_rate} over {gate.window} "
        f"speculating iterations), then no slower than the baseline"
    )
    k = ctx.spec.full_draft_length or ctx.spec.max_draft_len
    tokens_bound, requests_bound = hot_bound(gate, k, ctx.max_tokens)
    details: dict = {
        "acceptance_rate": gate.acceptance_rate,
        "window": gate.window,
        "hot_temperature": HOT_TEMPERATURE,
        "hot_bound": {"draft_tokens": tokens_bound, "requests": requests_bound},
        "slower_margin": SLOWER_MARGIN,
    }
    sender = _Sender(ctx)
    before = sender.greedy_phase("auto-disable: before", ctx.greedy_pass(ctx.target))  # the earlier checks' pass
    details["before"] = before.to_dict()
    if before.failures:
        return CheckResult(NAME, TITLE, FAILED, f"requests failed before: {before.first_failure}", details, gate_text)
    if before.missing == before.requests:
        return CheckResult(
            NAME, TITLE, SKIPPED, "the server returned no acceptance outputs (return_perf_metrics)", details, gate_text
        )
    if before.draft_tokens == 0:
        return CheckResult(
            NAME,
            TITLE,
            SKIPPED,
            "the greedy prompt set drafted nothing before the check (speculation was already off, or this traffic "
            "never drafts): there is no switch to see",
            details,
            gate_text,
        )

    hot = sender.hot_phase(tokens_bound, requests_bound)
    details["hot"] = hot.to_dict()
    if hot.failures:
        return CheckResult(NAME, TITLE, FAILED, f"a hot request failed: {hot.first_failure}", details, gate_text)

    scraped = ctx._scrape(ctx.target) if ctx.target.endpoints.metrics else None
    after = sender.greedy_phase("auto-disable: after")
    scraped_after = ctx._scrape(ctx.target) if scraped is not None else None
    server_after = None
    if isinstance(scraped, list) and isinstance(scraped_after, list):
        counts_before = SpecCounts.of(scraped, ctx.target.model)
        counts_after = SpecCounts.of(scraped_after, ctx.target.model)
        if counts_before is not None and counts_after is not None:
            server_after = counts_after - counts_before
    details["after"] = {**after.to_dict(), "server_counters": server_after.to_dict() if server_after else None}
    if after.failures:
        return CheckResult(NAME, TITLE, FAILED, f"requests failed after: {after.first_failure}", details, gate_text)
    status, summary = switch_verdict(gate, before, hot, after, server_after, tokens_bound)
    details["switch"] = {"status": status, "why": summary}
    if status != PASSED:
        return CheckResult(NAME, TITLE, status, summary, details, gate_text)

    if ctx.baseline is None:
        return CheckResult(
            NAME,
            TITLE,
            WARNED,
            f"{summary}; no baseline deployment, so 'no slower than the baseline' was not measured",
            details,
            gate_text,
        )
    point, failed = _paired_rounds(ctx, details)
    if failed:
        return CheckResult(NAME, TITLE, FAILED, f"{summary}; a timed request failed: {failed}", details, gate_text)
    slow_status, slow_summary = slower_verdict(point)
    details["no_slower"] = {"status": slow_status, "why": slow_summary}
    status = PASSED if slow_status == PASSED else slow_status
    return CheckResult(
        NAME,
        TITLE,
        status,
        f"{summary}; {slow_summary}",
        details,
        gate_text,
        inconclusive_allowed=ctx.recipe.validation.allow_inconclusive,
    )


def _paired_rounds(ctx: SuiteContext, details: dict) -> tuple[Speedup, str | None]:
    """The performance sweep's ABBA rounds at concurrency 1 over the prompt set, after the switch; and the first
    failed request's error (None: none failed)."""
    rounds = ctx.options.performance_rounds or ctx.recipe.validation.performance_rounds
    n = len(ctx.prompts)
    params = GenerateParams(max_tokens=ctx.options.perf_max_tokens or ctx.max_tokens, return_perf_metrics=False)
    deps = ctx.deployments()
    tps: dict[str, list[float]] = {d.label: [] for d in deps}
    failed = None
    for r in range(rounds):
        for dep in round_order(deps, r):
            records = run_level(ctx, dep, 1, n, params, stage=f"auto-disable: {dep.label}, round {r + 1}/{rounds}")
            failed = failed or next((f"{dep.label}: {rec.error}" for rec in records if not rec.ok), None)
            tps[dep.label].append(tokens_per_s(records))
    point = round_speedups(1, tps[ctx.target.label], tps[ctx.baseline.label])
    details["rounds"] = {"count": rounds, "requests_per_round": n, "tokens_per_s": tps, "speedup": point.to_dict()}
    return point, failed
