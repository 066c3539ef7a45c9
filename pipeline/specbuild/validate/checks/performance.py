"""Performance: a closed-loop concurrency sweep of the speculative and the baseline deployment in the same run
(level by level, alternating), with TTFT, inter-token latency, request latency (p50/p90/p99), output tokens/s and
requests/s per level; speedup per level and the crossover concurrency where speculation stops paying.
Gate: validation.min_speedup at concurrency 1."""

from __future__ import annotations

import itertools
import threading
import time

from specbuild.validate.aggregate import crossover, speedups, summarize_level
from specbuild.validate.checks.base import FAILED, PASSED, CheckResult, Deployment, SuiteContext, timed
from specbuild.validate.client import GenerateParams, Generation
from specbuild.validate.report.markdown import speedup_text
from specbuild.validate.stats import RequestRecord

NAME, TITLE = "performance", "Performance sweep (latency, throughput, speedup)"


def run_level(ctx: SuiteContext, dep: Deployment, concurrency: int, requests: int,
              params: GenerateParams) -> list[RequestRecord]:
    """`requests` requests, `concurrency` in flight at all times (closed loop), prompts in turn."""
    counter = itertools.count()
    records: list[RequestRecord] = []
    lock = threading.Lock()
    stage = f"performance: {dep.label}, concurrency {concurrency}"
    ctx.progress(stage, 0, requests)

    def worker() -> None:
        while True:
            i = next(counter)
            if i >= requests:
                return
            prompt = ctx.prompts[i % len(ctx.prompts)]
            try:
                gen = dep.generate(prompt.text, params, "http-stream")
            except Exception as e:  # noqa: BLE001 - a response the client could not read counts as failed
                gen = Generation("http-stream", time.perf_counter(), end=time.perf_counter(),
                                 error=f"{type(e).__name__}: {e}")
            rec = RequestRecord.from_generation(gen, dep.label, concurrency, prompt.index,
                                                tokens=ctx.count_tokens(gen) if gen.ids is None else None)
            with lock:
                records.append(rec)
                ctx.progress(stage, len(records), requests)

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return records


@timed
def run(ctx: SuiteContext) -> CheckResult:
    v = ctx.recipe.validation
    gate = f"validation.min_speedup >= {v.min_speedup} at concurrency 1" if v.min_speedup is not None else None
    levels = sorted(set(v.concurrency) | ({1} if v.min_speedup is not None else set()))
    params = GenerateParams(max_tokens=ctx.options.perf_max_tokens or v.max_tokens, return_perf_metrics=False)
    deps = ctx.deployments() if ctx.spec.speculative else [ctx.target]
    for dep in deps:  # warm up: first requests pay one-off costs (connections, lazy initialisation)
        dep.generate(ctx.prompts[0].text, params, "http-stream")
    levels_out: dict[str, list] = {d.label: [] for d in deps}
    for c in levels:
        n = ctx.options.requests_per_level or max(2 * c, len(ctx.prompts))
        for dep in deps:
            levels_out[dep.label].append(summarize_level(run_level(ctx, dep, c, n, params), dep.label, c))
    details: dict = {"levels": {k: [s.to_dict() for s in vs] for k, vs in levels_out.items()},
                     "max_tokens": params.max_tokens, "greedy": True, "protocol": "HTTP generate_stream",
                     "itl_definition": "gap between responses / tokens in the later response (GenAI-Perf)"}
    errors = [(s.deployment, s.concurrency, s.errors, s.first_error) for vs in levels_out.values() for s in vs
              if s.errors]
    summary_parts = []
    status = PASSED
    if "baseline" in levels_out:
        sp = speedups(levels_out["speculative"], levels_out["baseline"])
        cross = crossover(sp)
        details["speedup"] = [p.to_dict() for p in sp]
        details["crossover"] = cross.to_dict()
        summary_parts.append("speedup " + ", ".join(f"{speedup_text(p.value)} at {p.concurrency}" for p in sp
                                                      if p.value is not None))
        if cross.always_faster:
            summary_parts.append("faster at every level")
        elif cross.first_level_below_1 is not None:
            where = f"≈{cross.interpolated:.1f}" if cross.interpolated else f"{cross.first_level_below_1}"
            summary_parts.append(f"speculation stops paying at concurrency {where}")
        at1 = next((p.value for p in sp if p.concurrency == 1), None)
        if v.min_speedup is not None and (at1 is None or at1 < v.min_speedup):
            status = FAILED
            summary_parts.insert(0, f"speedup at concurrency 1 is {at1:.2f} < {v.min_speedup}" if at1 is not None
                                 else "no speedup measured at concurrency 1")
    else:
        summary_parts.append(", ".join(f"{s.output_tokens_per_s:.0f} tok/s at {s.concurrency}"
                                       for s in levels_out[ctx.target.label]))
    if errors:
        status = FAILED
        dep, c, n, first = errors[0]
        summary_parts.insert(0, f"{sum(e[2] for e in errors)} request(s) failed (first: {dep} at concurrency {c}: "
                                f"{first})")
    return CheckResult(NAME, TITLE, status, "; ".join(summary_parts), details, gate)
