"""Acceptance: per request acceptance_rate, total_accepted_draft_tokens and total_draft_tokens (the server's
return_perf_metrics outputs) over the greedy prompt set; mean acceptance length (specbuild.metrics, bonus token
included); per-position acceptance and the histogram of accepted drafts per step when the deployment streams one
response per step. Gate: validation.min_acceptance_length.

Server side: when the target's metrics endpoint is known, the suite scrapes it just before and after the greedy
HTTP pass these records come from, and reads specbuild's speculative counters (server_metrics.py) of the model
that verifies the drafts: the BLS for the methods it drives, else tensorrt_llm. Draft tokens, accepted tokens
and verification steps must equal the client's sums, and so the two ALs (a disagreement fails the check on a
loopback deployment, where specbuild started the server and no other client sends requests; elsewhere it is a
warning). TensorRT-LLM's C++ backend exports no such counters: the comparison is then reported as unavailable."""

from __future__ import annotations

from specbuild import metrics
from specbuild.triton import params as triton_params
from specbuild.validate.aggregate import summarize_acceptance
from specbuild.validate.checks.base import FAILED, PASSED, SKIPPED, WARNED, CheckResult, SuiteContext, timed
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


def server_side(ctx: SuiteContext, records: list[AcceptanceRecord]) -> tuple[dict, str | None]:
    """The server's counters over the greedy pass, and a sentence when they disagree with the client's."""
    from specbuild.validate.server_metrics import STEPS, SpecCounts

    scrapes = ctx.server_scrapes
    if scrapes is None:
        return {"available": False, "why": "no metrics endpoint (specbuild validate --metrics-url)"}, None
    if isinstance(scrapes, str):
        return {"available": False, "why": scrapes}, None
    model = "tensorrt_llm_bls" if triton_params.bls_driven(ctx.recipe, "target") else "tensorrt_llm"
    before, after = scrapes
    counts = SpecCounts.of(after, model)
    if counts is None:
        return {"available": False, "why": f"the server exports no {STEPS}{{model=\"{model}\"}} (TensorRT-LLM's C++ "
                "backend has no speculative counters; specbuild's reference tensorrt_llm and its BLS export them)"}, \
            None
    delta = counts - SpecCounts.of(before, model)
    client = {"steps": sum(r.steps for r in records), "draft_tokens": sum(r.draft_tokens for r in records),
              "accepted_tokens": sum(r.accepted_draft_tokens for r in records)}
    client["mean_acceptance_length"] = metrics.mean_acceptance_length(client["accepted_tokens"], client["steps"])
    details = {"available": True, "model": model, "server": delta.to_dict(), "client": client,
               "requests": len(records), "prompts": len(ctx.prompts)}
    differ = [f"{name} {getattr(delta, attr)} (server) vs {client[name]} (client)"
              for name, attr in (("draft_tokens", "draft_tokens"), ("accepted_tokens", "accepted"),
                                 ("steps", "steps")) if getattr(delta, attr) != client[name]]
    if len(records) != len(ctx.prompts):
        differ.append(f"only {len(records)} of {len(ctx.prompts)} requests returned acceptance outputs")
    details["agree"] = not differ
    return details, ("server-side counters disagree with the client's: " + "; ".join(differ)) if differ else None


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
    details["server_side"], disagreement = server_side(ctx, records)
    if details["server_side"]["available"]:
        summary += f"; server-side AL {details['server_side']['server']['mean_acceptance_length']:.2f}"
    if threshold is not None and s.mean_acceptance_length < threshold:
        return CheckResult(NAME, TITLE, FAILED, f"AL {s.mean_acceptance_length:.2f} < {threshold}: " + summary,
                           details, gate)
    if disagreement:
        status = FAILED if ctx.target.endpoints.loopback else WARNED
        return CheckResult(NAME, TITLE, status, f"{disagreement} — {summary}", details, gate)
    return CheckResult(NAME, TITLE, PASSED, summary, details, gate)
