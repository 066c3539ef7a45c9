"""Acceptance: per request acceptance_rate, total_accepted_draft_tokens and total_draft_tokens (the server's
return_perf_metrics outputs) over the greedy prompt set; mean acceptance length (specbuild.metrics, bonus token
included); per-position acceptance and the histogram of accepted drafts per step when the deployment streams one
response per step. Gate: validation.min_acceptance_length."""

from __future__ import annotations

from specbuild.triton import params as triton_params
from specbuild.validate.aggregate import summarize_acceptance
from specbuild.validate.checks.base import FAILED, PASSED, SKIPPED, CheckResult, SuiteContext, timed
from specbuild.validate.stats import AcceptanceRecord

NAME, TITLE = "acceptance", "Acceptance (draft tokens accepted)"


def _records(ctx: SuiteContext) -> list[AcceptanceRecord]:
    plain = ctx.greedy_pass(ctx.target, "http")
    streamed = ctx.greedy_pass(ctx.target, "http-stream") if ctx.target.streams else [None] * len(plain)
    prefill_is_step = triton_params.bls_driven(ctx.recipe, "target")  # external drafts are verified from prefill
    out = []
    for p, g, s in zip(ctx.prompts, plain, streamed):
        if g.ok:
            rec = AcceptanceRecord.from_generation(g, p.index, s, prefill_is_step=prefill_is_step, prompt=p.id,
                                                   tokens=ctx.count_tokens(g))
            if rec is not None:
                out.append(rec)
    return out


@timed
def run(ctx: SuiteContext) -> CheckResult:
    threshold = ctx.recipe.validation.min_acceptance_length
    gate = f"validation.min_acceptance_length >= {threshold}" if threshold is not None else None
    if not ctx.spec.speculative:
        return CheckResult(NAME, TITLE, SKIPPED, "no speculation", gate=gate)
    records = _records(ctx)
    if not records:
        summary = "the server returned no acceptance outputs (return_perf_metrics: acceptance_rate, " \
                  "total_accepted_draft_tokens, total_draft_tokens)"
        return CheckResult(NAME, TITLE, FAILED if gate else SKIPPED, summary, {}, gate)
    s = summarize_acceptance(records)
    details = s.to_dict()
    details["definition"] = ("AL = 1 + accepted draft tokens / verification steps, pooled over every request; "
                             "steps are the streamed responses after the prefill's when the deployment streams, "
                             "else output tokens - accepted draft tokens - 1 (the prefill's token)")
    per_req = s.per_request_acceptance_length or {}
    summary = (f"AL {s.mean_acceptance_length:.2f} (per request {per_req.get('min', 0):.2f}–{per_req.get('max', 0):.2f}), "
               f"acceptance rate {s.acceptance_rate:.1%} of {s.draft_tokens} draft tokens over {s.requests} requests")
    if s.per_position:
        summary += "; per position " + " / ".join(f"{v:.2f}" for v in s.per_position[:6])
    if threshold is not None and s.mean_acceptance_length < threshold:
        return CheckResult(NAME, TITLE, FAILED, f"AL {s.mean_acceptance_length:.2f} < {threshold}: " + summary,
                           details, gate)
    return CheckResult(NAME, TITLE, PASSED, summary, details, gate)
