"""Performance: a closed-loop concurrency sweep of the speculative and the baseline deployment in the same run, with
TTFT, inter-token latency, request latency (p50/p90/p99), output tokens/s and requests/s per level; speedup per
level and the crossover concurrency where speculation stops paying.

Figures a shared machine cannot bend: each level runs `validation.performance_rounds` rounds, and in each round
both deployments serve the same prompts one after the other, taking turns in ABBA order (speculative, baseline |
baseline, speculative | ...), so a change in background load hits both sides alike. Every round gives one speedup;
a level's speedup is their median, reported with their min and max, and the crossover is found on the medians
(levels whose rounds straddle 1 are named as uncertain). While the sweep runs, the share of this machine's CPU
time taken by other processes is measured (machine_load.py).

Gate validation.min_speedup (at concurrency 1): passed when every round reaches it and the machine was not busy
with other work; failed when no round reaches it; otherwise "inconclusive" — the measurements cannot decide, and
the run fails unless validation.allow_inconclusive."""

from __future__ import annotations

import itertools
import math
import threading
import time

from specbuild.validate.aggregate import (
    crossover,
    round_speedups,
    summarize_level,
    tokens_per_s,
    wall_time,
)
from specbuild.validate.checks.base import (
    FAILED,
    INCONCLUSIVE,
    PASSED,
    WARNED,
    CheckResult,
    Deployment,
    SuiteContext,
    timed,
)
from specbuild.validate.client import GenerateParams, Generation
from specbuild.validate.local_server import LocalServer
from specbuild.validate.machine_load import BUSY_THRESHOLD, LoadMeter
from specbuild.validate.report.markdown import crossover_text, speedup_text
from specbuild.validate.stats import RequestRecord

NAME, TITLE = "performance", "Performance sweep (latency, throughput, speedup)"
GATE_LEVEL = 1


def run_level(
    ctx: SuiteContext,
    dep: Deployment,
    concurrency: int,
    requests: int,
    params: GenerateParams,
    *,
    first_prompt: int = 0,
    stage: str | None = None,
) -> list[RequestRecord]:
    """`requests` requests, `concurrency` in flight at all times (closed loop), prompts in turn from
    `first_prompt`."""
    counter = itertools.count()
    records: list[RequestRecord] = []
    lock = threading.Lock()
    stage = stage or f"performance: {dep.label}, concurrency {concurrency}"
    ctx.progress(stage, 0, requests)

    def worker() -> None:
        while True:
            i = next(counter)
            if i >= requests:
                return
            prompt = ctx.prompts[(first_prompt + i) % len(ctx.prompts)]
            try:
                gen = dep.generate(prompt.text, params, "http-stream")
            except Exception as e:  # noqa: BLE001 - a response the client could not read counts as failed
                gen = Generation(
                    "http-stream", time.perf_counter(), end=time.perf_counter(), error=f"{type(e).__name__}: {e}"
                )
            rec = RequestRecord.from_generation(
                gen,
                dep.label,
                concurrency,
                prompt.index,
                tokens=ctx.count_tokens(gen) if gen.ids is None else None,
                chunk_tokens=ctx.chunk_tokens(gen) if gen.ids is None else None,
            )
            with lock:
                records.append(rec)
                ctx.progress(stage, len(records), requests)

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return records


def round_order(deps: list[Deployment], round_index: int) -> list[Deployment]:
    """ABBA: even rounds in the given order, odd rounds reversed (a linear drift in load cancels out)."""
    return deps if round_index % 2 == 0 else list(reversed(deps))


def requests_per_round(ctx: SuiteContext, concurrency: int, rounds: int) -> int:
    """Default: the prompt set spread over the rounds, at least one request per client."""
    return ctx.options.requests_per_level or max(concurrency, math.ceil(len(ctx.prompts) / rounds))


def gate_verdict(point, gate: float, foreign_share: float | None) -> tuple[str, str]:
    """(status, why) of min_speedup at the gate level. point: aggregate.Speedup (None: nothing measured)."""
    if point is None or point.value is None:
        return FAILED, f"no speedup measured at concurrency {GATE_LEVEL}"
    spread = f"{point.value:.2f} (rounds {point.low:.2f}–{point.high:.2f})"
    if point.high < gate:
        return FAILED, f"speedup at concurrency {GATE_LEVEL} is {spread} < {gate}"
    if point.low < gate:
        return INCONCLUSIVE, (
            f"inconclusive: the rounds disagree about validation.min_speedup >= {gate} at "
            f"concurrency {GATE_LEVEL}: speedup {spread}; the machine is too noisy to judge "
            "the gate — rerun on a quiet machine, raise validation.performance_rounds, or set "
            "validation.allow_inconclusive"
        )
    if foreign_share is not None and foreign_share > BUSY_THRESHOLD:
        return INCONCLUSIVE, (
            f"inconclusive: speedup {spread} at concurrency {GATE_LEVEL}, but other processes "
            f"took {foreign_share:.0%} of this machine's CPU time while it was measured (more "
            f"than {BUSY_THRESHOLD:.0%}; contention slows the baseline more and inflates the "
            "speedup) — rerun on a quiet machine or set validation.allow_inconclusive"
        )
    return PASSED, f"speedup at concurrency {GATE_LEVEL} is {spread} >= {gate}"


def slowdown_warning(point) -> str | None:
    """A sentence when the speculative deployment is slower than its baseline at concurrency 1 (the median of
    the rounds below 1), gate or no gate: speculation that costs more than it earns is never silent."""
    if point is None or point.value is None or point.value >= 1.0:
        return None
    spread = f"{point.value:.2f} (rounds {point.low:.2f}–{point.high:.2f}" + (
        "; every round slower)" if point.high < 1.0 else "; the rounds disagree)"
    )
    return (
        f"slower than the baseline at concurrency {GATE_LEVEL}: speedup {spread} — check the acceptance per "
        "category and the draft length, or set validation.min_speedup to gate on it"
    )


@timed
def run(ctx: SuiteContext) -> CheckResult:
    v = ctx.recipe.validation
    gate = (
        f"validation.min_speedup >= {v.min_speedup} at concurrency {GATE_LEVEL}" if v.min_speedup is not None else None
    )
    levels = sorted(set(v.concurrency) | ({GATE_LEVEL} if v.min_speedup is not None else set()))
    rounds = ctx.options.performance_rounds or v.performance_rounds
    params = GenerateParams(max_tokens=ctx.options.perf_max_tokens or v.max_tokens, return_perf_metrics=False)
    deps = ctx.deployments() if ctx.spec.speculative else [ctx.target]
    servers = [s for s in (LocalServer.find(d.endpoints.http) for d in deps) if s is not None]
    for dep in deps:  # warm up: first requests pay one-off costs (connections, lazy initialisation)
        dep.generate(ctx.prompts[0].text, params, "http-stream")
    levels_out: dict[str, list] = {d.label: [] for d in deps}
    per_round_tps: dict[int, dict[str, list[float]]] = {}
    load: dict[int, dict | None] = {}
    for c in levels:
        n = requests_per_round(ctx, c, rounds)
        records: dict[str, list[RequestRecord]] = {d.label: [] for d in deps}
        walls: dict[str, float] = {d.label: 0.0 for d in deps}
        per_round_tps[c] = {d.label: [] for d in deps}
        meter = LoadMeter(servers)
        meter.start()
        for r in range(rounds):
            for dep in round_order(deps, r):
                recs = run_level(
                    ctx,
                    dep,
                    c,
                    n,
                    params,
                    first_prompt=r * n,
                    stage=f"performance: {dep.label}, concurrency {c}, round {r + 1}/{rounds}",
                )
                records[dep.label] += recs
                walls[dep.label] += wall_time(recs)
                per_round_tps[c][dep.label].append(tokens_per_s(recs))
        sample = meter.stop()
        load[c] = sample.to_dict() if sample is not None else None
        for dep in deps:
            levels_out[dep.label].append(summarize_level(records[dep.label], dep.label, c, wall_s=walls[dep.label]))
    details: dict = {
        "levels": {k: [s.to_dict() for s in vs] for k, vs in levels_out.items()},
        "max_tokens": params.max_tokens,
        "greedy": True,
        "protocol": "HTTP generate_stream",
        "itl_definition": "gap between responses / tokens in the later response (GenAI-Perf)",
        "rounds": rounds,
        "requests_per_round": {c: requests_per_round(ctx, c, rounds) for c in levels},
        "round_order": "ABBA",  # round_order(): the deployments take turns, odd rounds reversed
        "round_tokens_per_s": per_round_tps,
        "machine_load": load,
        "busy_threshold": BUSY_THRESHOLD,
    }
    errors = [
        (s.deployment, s.concurrency, s.errors, s.first_error) for vs in levels_out.values() for s in vs if s.errors
    ]
    summary_parts = []
    status = PASSED
    if "baseline" in levels_out:
        sp = [round_speedups(c, per_round_tps[c]["speculative"], per_round_tps[c]["baseline"]) for c in levels]
        cross = crossover(sp)
        details["speedup"] = [p.to_dict() for p in sp]
        details["crossover"] = cross.to_dict()
        summary_parts.append(
            "speedup "
            + ", ".join(
                f"{speedup_text(p.value)} ({speedup_text(p.low)}–{speedup_text(p.high)}) at {p.concurrency}"
                for p in sp
                if p.value is not None
            )
        )
        said = crossover_text(details["crossover"])
        if said:
            summary_parts.append(said)
        if cross.uncertain_levels:
            summary_parts.append(
                "rounds disagree about speedup >= 1 at concurrency " + ", ".join(str(c) for c in cross.uncertain_levels)
            )
        if v.min_speedup is not None:
            point = next((p for p in sp if p.concurrency == GATE_LEVEL), None)
            share = (load.get(GATE_LEVEL) or {}).get("foreign_share")
            status, why = gate_verdict(point, v.min_speedup, share)
            details["gate_verdict"] = {"status": status, "why": why, "foreign_share": share}
            if status != PASSED:
                summary_parts.insert(0, why)
        slower = slowdown_warning(next((p for p in sp if p.concurrency == GATE_LEVEL), None))
        details["slower_than_baseline"] = slower
        if slower is not None:
            summary_parts.insert(0 if status == PASSED else 1, slower)
            status = WARNED if status == PASSED else status
    else:
        summary_parts.append(
            ", ".join(f"{s.output_tokens_per_s:.0f} tok/s at {s.concurrency}" for s in levels_out[ctx.target.label])
        )
    if not ctx.target.contract.has_ids and ctx.tokenizer is None:  # stats.chunk_token_counts: 1 per response
        details["token_counts"] = f"streamed responses, not tokens: no client tokenizer ({ctx.tokenizer_problem})"
        summary_parts.append("tokens counted as streamed responses (no client tokenizer)")
    busy = {c: s["foreign_share"] for c, s in load.items() if s and s["foreign_share"] > BUSY_THRESHOLD}
    if busy:
        summary_parts.append(
            "machine busy with other work ("
            + ", ".join(f"{share:.0%} at concurrency {c}" for c, share in busy.items())
            + ")"
        )
    if errors:
        status = FAILED
        dep, c, n, first = errors[0]
        summary_parts.insert(
            0, f"{sum(e[2] for e in errors)} request(s) failed (first: {dep} at concurrency {c}: {first})"
        )
    return CheckResult(
        NAME, TITLE, status, "; ".join(summary_parts), details, gate, inconclusive_allowed=v.allow_inconclusive
    )
