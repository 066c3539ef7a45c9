"""Acceptance: per request acceptance_rate, total_accepted_draft_tokens and total_draft_tokens (the server's
return_perf_metrics outputs) over the greedy prompt set; mean acceptance length (specbuild.facts.metrics, bonus token
included); per-position acceptance (positions 1..the deepest a step can accept, Speculation.accept_depth) and the
histogram of accepted drafts per step when the deployment streams one response per step with its token ids: read
from each streamed request on its own (stats.steps_in_stream), pooled over the requests whose stream tells its steps,
the others named with the reason (a response carrying several steps). The same per category of the prompt set and
per context-length bucket (aggregate.acceptance_by), each with a percentile bootstrap interval over the requests. Gate:
validation.min_acceptance_length, a number for the whole set or one per category ({default: 2.0, coding: 2.5}),
judged on the interval: passed when all of it reaches the minimum, failed when none of it does, inconclusive
otherwise (more prompts would decide; validation.allow_inconclusive lets it pass).

An llm-api deployment (no token ids) counts its steps from the stream (one response per LLM iteration) when the
streamed text equals the non-streamed one, else from the tokenizer's count of the text. Where such a server
returns zero counters on every request of a speculative deployment (TensorRT-LLM <= 1.2.1 fills them only in the
TensorRT engine flow; NVIDIA/TensorRT-LLM PR #17082), AL falls back on the stream alone: (output tokens - 1) /
(streamed responses - 1), and the report says so; the acceptance rate is then unknown.

Server side: when the target's metrics endpoint is known, the suite scrapes it just before and after the greedy
HTTP pass these records come from, and reads specbuild's speculative counters (server_metrics.py) of the model
that verifies the drafts: the BLS for the methods it drives, else tensorrt_llm. Draft tokens, accepted tokens
and verification steps must equal the client's sums, and so the two ALs (a disagreement fails the check on a
loopback deployment, where specbuild started the server and no other client sends requests; elsewhere it is a
warning). TensorRT-LLM's C++ backend and NVIDIA's llmapi model export no such counters: the comparison is then
reported as unavailable."""

from __future__ import annotations

from dataclasses import replace

from specbuild.facts import metrics
from specbuild.recipe.schema import DEFAULT_CATEGORY
from specbuild.repository.engine import params as triton_params
from specbuild.validate.aggregate import (
    BOOTSTRAP_RESAMPLES,
    BOOTSTRAP_SEED,
    CONFIDENCE,
    GroupAcceptance,
    Interval,
    acceptance_by,
    distribution,
    group_acceptance,
    length_bucket,
    positions_of,
    summarize_acceptance,
)
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
from specbuild.validate.server_metrics import STEPS, SpecCounts
from specbuild.validate.stats import AcceptanceRecord, stream_acceptance_length, stream_matches

NAME, TITLE = "acceptance", "Acceptance (draft tokens accepted)"
# Whether a request's prefill is a verification step: the engine flavour's BLS methods verify external drafts
# from the prefill on; the LLM API's prefill (context phase) emits one token with no drafts.
PREFILL_IS_STEP = {"engine": lambda spec: triton_params.bls_driven(spec, "target"), "llm-api": lambda spec: False}
# Whether the stream is meant to carry one response per verification step: not the BLS's, which sends one per round
# (the drafts' verification and the target's plain steps after a partial acceptance). A recipe's
# triton.stream_interval > 1 sends one every N steps besides (stream_per_step).
STREAM_PER_STEP = {"engine": lambda spec: not triton_params.bls_driven(spec, "target"), "llm-api": lambda spec: True}


def stream_per_step(ctx: SuiteContext) -> bool:
    return STREAM_PER_STEP[ctx.target.contract.name](ctx.spec) and ctx.recipe.triton.stream_interval == 1


ZERO_COUNTERS = (
    "the server returned zero speculative counters on every request (total_draft_tokens 0) although "
    "the deployment speculates: TensorRT-LLM <= 1.2.1 fills them only in the TensorRT engine flow "
    "(NVIDIA/TensorRT-LLM PR #17082)"
)
DEFINITION = (
    "AL = 1 + accepted draft tokens / verification steps, pooled over every request; steps are the "
    "streamed responses after the prefill's when the deployment streams one response per step, else "
    "output tokens - accepted draft tokens - 1 (the prefill's token; 0 where the BLS verifies external "
    "drafts from the prefill on)"
)


def _passes(ctx: SuiteContext):
    plain = ctx.greedy_pass(ctx.target, "http")
    streamed = ctx.greedy_pass(ctx.target, "http-stream") if ctx.target.streams else [None] * len(plain)
    return plain, streamed


def _records(ctx: SuiteContext) -> list[AcceptanceRecord]:
    plain, streamed = _passes(ctx)
    contract = ctx.target.contract
    prefill_is_step = PREFILL_IS_STEP[contract.name](ctx.spec)
    per_step = stream_per_step(ctx)
    out = []
    for p, g, s in zip(ctx.prompts, plain, streamed):
        if g.ok:
            rec = AcceptanceRecord.from_generation(
                g,
                p.index,
                s,
                prefill_is_step=prefill_is_step,
                prompt=p.id,
                tokens=ctx.count_tokens(g),
                stream_steps=not contract.has_ids,
                stream_per_step=per_step,
            )
            if rec is not None:
                out.append(replace(rec, category=p.category, prompt_tokens=ctx.prompt_tokens.get(p.id)))
    return out


def _stream_fallback(ctx: SuiteContext, gate: str | None, threshold: float | None) -> CheckResult:
    """AL from the stream alone, for a server whose counters read zero."""
    plain, streamed = _passes(ctx)
    rows, tokens_after_prefill, steps = [], 0, 0
    for p, g, s in zip(ctx.prompts, plain, streamed):
        n = ctx.count_tokens(g) if g.ok else None
        found = stream_acceptance_length(n, s) if n is not None and stream_matches(g, s) else None
        if found is not None:
            rows.append({"prompt": p.id, "output_tokens": n, "steps": found[0], "acceptance_length": found[1]})
            tokens_after_prefill += n - 1
            steps += found[0]
    details = {"zero_counters": True, "note": ZERO_COUNTERS, "records": rows}
    if not steps:
        why = (
            "the deployment does not stream"
            if not ctx.target.streams
            else "no streamed request matched its non-streamed text"
        )
        summary = f"{ZERO_COUNTERS}; no fallback: {why} (set triton.streaming: true to estimate AL from the stream)"
        return CheckResult(NAME, TITLE, FAILED if gate else SKIPPED, summary, details, gate)
    al = tokens_after_prefill / steps
    details.update(
        mean_acceptance_length=al,
        steps=steps,
        acceptance_rate=None,
        per_request_acceptance_length=distribution([r["acceptance_length"] for r in rows]),
        definition="fallback: AL = (output tokens - 1) / (streamed responses - 1) pooled over the "
        "prompt set (one response per LLM iteration; tokens counted by the tokenizer); the "
        "acceptance rate is unknown",
    )
    summary = (
        f"AL {al:.2f} estimated from the stream over {len(rows)} requests ({ZERO_COUNTERS}; fallback: "
        "(output tokens - 1) / (streamed responses - 1), acceptance rate unknown)"
    )
    if threshold is not None and al < threshold:
        return CheckResult(NAME, TITLE, FAILED, f"AL {al:.2f} < {threshold}: " + summary, details, gate)
    return CheckResult(NAME, TITLE, PASSED, summary, details, gate)


def server_side(ctx: SuiteContext, records: list[AcceptanceRecord]) -> tuple[dict, str | None]:
    """The server's counters over the greedy pass, and a sentence when they disagree with the client's."""
    scrapes = ctx.server_scrapes
    if scrapes is None:
        return {"available": False, "why": "no metrics endpoint (specbuild validate --metrics-url)"}, None
    if isinstance(scrapes, str):
        return {"available": False, "why": scrapes}, None
    # the model that verifies the drafts: the serving model, but tensorrt_llm behind an ensemble
    model = "tensorrt_llm" if ctx.target.model == "ensemble" else ctx.target.model
    before, after = scrapes
    counts = SpecCounts.of(after, model)
    if counts is None:
        return {
            "available": False,
            "why": f'the server exports no {STEPS}{{model="{model}"}} (TensorRT-LLM\'s C++ '
            "backend has no speculative counters; specbuild's reference tensorrt_llm and its BLS export them)",
        }, None
    delta = counts - SpecCounts.of(before, model)
    client = {
        "steps": sum(r.steps for r in records),
        "draft_tokens": sum(r.draft_tokens for r in records),
        "accepted_tokens": sum(r.accepted_draft_tokens for r in records),
    }
    client["mean_acceptance_length"] = metrics.mean_acceptance_length(client["accepted_tokens"], client["steps"])
    details = {
        "available": True,
        "model": model,
        "server": delta.to_dict(),
        "client": client,
        "requests": len(records),
        "prompts": len(ctx.prompts),
    }
    differ = [
        f"{name} {getattr(delta, attr)} (server) vs {client[name]} (client)"
        for name, attr in (("draft_tokens", "draft_tokens"), ("accepted_tokens", "accepted"), ("steps", "steps"))
        if getattr(delta, attr) != client[name]
    ]
    if len(records) != len(ctx.prompts):
        differ.append(f"only {len(records)} of {len(ctx.prompts)} requests returned acceptance outputs")
    details["agree"] = not differ
    return details, ("server-side counters disagree with the client's: " + "; ".join(differ)) if differ else None


ALL_PROMPTS = "all prompts"  # the group a scalar min_acceptance_length gates


def gate_text(threshold) -> str | None:
    if threshold is None:
        return None
    if isinstance(threshold, dict):
        return "validation.min_acceptance_length per category " + ", ".join(f"{k} >= {v}" for k, v in threshold.items())
    return f"validation.min_acceptance_length >= {threshold}"


def judge(interval: Interval, threshold: float) -> str:
    """A gate on an interval: passed when all of it reaches the threshold, failed when none of it does,
    inconclusive when it straddles the threshold (too few requests to tell)."""
    if interval.low >= threshold:
        return PASSED
    if interval.high < threshold:
        return FAILED
    return INCONCLUSIVE


def gate_verdicts(
    threshold, overall: GroupAcceptance, by_category: list[GroupAcceptance]
) -> tuple[list[dict], list[str]]:
    """One verdict per gated group ({group, threshold, acceptance_length, status}) and the categories the gate
    names that the prompt set does not hold."""
    if threshold is None:
        return [], []
    if not isinstance(threshold, dict):
        return [
            {
                "group": ALL_PROMPTS,
                "threshold": threshold,
                "acceptance_length": overall.acceptance_length.to_dict(),
                "status": judge(overall.acceptance_length, threshold),
            }
        ], []
    verdicts = []
    for g in by_category:
        t = threshold.get(g.group, threshold.get(DEFAULT_CATEGORY))
        if t is not None:
            verdicts.append(
                {
                    "group": g.group,
                    "threshold": t,
                    "acceptance_length": g.acceptance_length.to_dict(),
                    "status": judge(g.acceptance_length, t),
                }
            )
    held = {g.group for g in by_category}
    return verdicts, [k for k in threshold if k != DEFAULT_CATEGORY and k not in held]


def _interval_text(iv: dict) -> str:
    return f"{iv['value']:.2f} [{iv['low']:.2f}–{iv['high']:.2f}]"


def _gate_outcome(verdicts: list[dict], missing: list[str]) -> tuple[str, str]:
    """The check's status from the groups' verdicts, and the sentence that says why."""
    failed = [v for v in verdicts if v["status"] == FAILED]
    unsure = [v for v in verdicts if v["status"] == INCONCLUSIVE]
    pct = f"{CONFIDENCE:.0%} interval"
    if failed:
        return FAILED, "; ".join(
            f"{v['group']}: AL {_interval_text(v['acceptance_length'])} below {v['threshold']} (all of its {pct})"
            for v in failed
        )
    if unsure:
        return INCONCLUSIVE, "inconclusive: " + "; ".join(
            f"{v['group']}: AL {_interval_text(v['acceptance_length'])} straddles {v['threshold']} (its {pct}; "
            "more prompts of the group would decide)"
            for v in unsure
        )
    text = "; ".join(f"{v['group']} AL {_interval_text(v['acceptance_length'])} >= {v['threshold']}" for v in verdicts)
    if missing:
        text += "; no prompts of " + ", ".join(missing) + " (its gate is not judged)"
    return PASSED, text


def grouped(records: list[AcceptanceRecord], positions: int | None = None) -> dict:
    """Acceptance over all records, per category and per context-length bucket, each with its intervals, per
    position over the same draft positions (`positions`: the deployment's deepest acceptance)."""
    depth = positions_of(records, positions)
    return {
        "overall": group_acceptance(ALL_PROMPTS, records, depth=depth),
        "by_category": acceptance_by(records, lambda r: r.category or "uncategorised", depth),
        "by_context_length": acceptance_by(
            sorted(records, key=lambda r: r.prompt_tokens or 0), lambda r: length_bucket(r.prompt_tokens), depth
        ),
    }


def per_position_note(records: list[AcceptanceRecord], summary) -> str | None:
    """Which requests per-position acceptance leaves out and why (None when it pools every request)."""
    left = [r for r in records if r.accepted_per_step is None]
    if not left:
        return None
    why: dict[str, list[str]] = {}
    for r in left:
        why.setdefault(r.per_step_note or "no per-step sizes", []).append(r.prompt or str(r.prompt_index))
    reasons = "; ".join(f"{', '.join(prompts)}: {text}" for text, prompts in why.items())
    if summary.per_position is None:
        return f"per-position acceptance needs each step's accepted drafts, which no request gave ({reasons})"
    return f"per-position acceptance from {summary.per_position_requests} of {summary.requests} requests ({reasons})"


@timed
def run(ctx: SuiteContext) -> CheckResult:
    threshold = ctx.recipe.validation.min_acceptance_length
    gate = gate_text(threshold)
    if not ctx.spec.speculative:
        return CheckResult(NAME, TITLE, SKIPPED, "no speculation", gate=gate)
    records = _records(ctx)
    if not records:
        summary = (
            "the server returned no acceptance outputs (return_perf_metrics: acceptance_rate, "
            "total_accepted_draft_tokens, total_draft_tokens)"
        )
        if not ctx.target.contract.has_ids and ctx.tokenizer is None:  # no way to count the output tokens
            summary = (
                "output tokens cannot be counted: the responses carry no token ids and there is no client "
                f"tokenizer ({ctx.tokenizer_problem})"
            )
        return CheckResult(NAME, TITLE, FAILED if gate else SKIPPED, summary, {}, gate)
    if ctx.target.contract.counters_may_read_zero and all(r.draft_tokens == 0 for r in records):
        if not isinstance(threshold, dict):
            return _stream_fallback(ctx, gate, threshold)
        found = _stream_fallback(ctx, gate, None)
        if found.status != PASSED:
            return found
        return replace(
            found,
            status=INCONCLUSIVE,
            inconclusive_allowed=ctx.recipe.validation.allow_inconclusive,
            summary="inconclusive: the per-category gate needs the speculative counters per request, "
            "which this server returns as zero — " + found.summary,
        )
    positions = ctx.spec.accept_depth
    s = summarize_acceptance(records, positions)
    details = s.to_dict()
    details["positions"] = positions_of(records, positions)
    details["per_position_note"] = per_position_note(records, s)
    details["definition"] = DEFINITION
    steps_from = sorted({r.steps_from for r in records})
    details["steps_from"] = steps_from
    groups = grouped(records, positions)
    details["interval"] = {
        "confidence": CONFIDENCE,
        "resamples": BOOTSTRAP_RESAMPLES,
        "seed": BOOTSTRAP_SEED,
        "over": "requests (percentile bootstrap; AL and rates pooled per verification step)",
    }
    details["overall"] = groups["overall"].to_dict()
    details["by_category"] = [g.to_dict() for g in groups["by_category"]]
    details["by_context_length"] = [g.to_dict() for g in groups["by_context_length"]]
    per_req = s.per_request_acceptance_length or {}
    al = groups["overall"].acceptance_length
    summary = (
        f"AL {al.value:.2f} [{al.low:.2f}–{al.high:.2f}] (per request {per_req.get('min', 0):.2f}–"
        f"{per_req.get('max', 0):.2f}), acceptance rate {s.acceptance_rate:.1%} of {s.draft_tokens} draft "
        f"tokens over {s.requests} requests"
    )
    if len(groups["by_category"]) > 1:
        summary += "; per category " + ", ".join(
            f"{g.group} {g.acceptance_length.value:.2f}" for g in groups["by_category"]
        )
    if s.per_position:
        summary += "; per position " + " / ".join(f"{v:.2f}" for v in s.per_position)
        if s.per_position_requests < s.requests:
            summary += f" (from {s.per_position_requests} of {s.requests} requests: report.json says why)"
    elif not ctx.target.contract.has_ids:
        summary += (
            f"; steps from the {' and '.join(steps_from)} (per-position acceptance needs token ids, which "
            "the llm-api contract does not return)"
        )
    details["server_side"], disagreement = server_side(ctx, records)
    if details["server_side"]["available"]:
        summary += f"; server-side AL {details['server_side']['server']['mean_acceptance_length']:.2f}"
    verdicts, missing = gate_verdicts(threshold, groups["overall"], groups["by_category"])
    details["gate_verdicts"], details["gate_categories_missing"] = verdicts, missing
    status, why = _gate_outcome(verdicts, missing)
    if status != PASSED:
        return CheckResult(
            NAME,
            TITLE,
            status,
            f"{why} — {summary}",
            details,
            gate,
            inconclusive_allowed=ctx.recipe.validation.allow_inconclusive,
        )
    if disagreement:
        status = FAILED if ctx.target.endpoints.loopback else WARNED
        return CheckResult(NAME, TITLE, status, f"{disagreement} — {summary}", details, gate)
    if why:
        summary += f"; gate: {why}"
    return CheckResult(NAME, TITLE, PASSED, summary, details, gate)
