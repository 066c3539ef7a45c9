"""Cost model: the speedup the method's calls allow on this machine, next to the one measured, per concurrency level.

From per-call costs measured in process (specbuild/facts/cost_model.py): t(1) the target's forward in an autoregressive
step, t(verify) its forward in a speculative step, t(draft) a step's drafting, all at the level's number of requests,
and the acceptance length AL of the same runs,

    limit = AL x t(1) / (t(verify) + t(draft))

is printed beside the speedup measured in process (the same runs) and served (the performance check's median), so a
reader sees how far the deployment is from its own limit and which cost keeps that limit where it is. The costs come
from the served engines decoded in this process (`Runtime.call_costs`: the reference runtime, engines on this
machine); elsewhere the check is skipped. No gate: the figures explain the performance check, they decide nothing."""

from __future__ import annotations

import os
from dataclasses import replace

from specbuild.standalone.model_parameters import parameter
from specbuild.validate.checks.base import PASSED, SKIPPED, CheckResult, SuiteContext, timed

NAME, TITLE = "cost_model", "Cost model (per-call costs and the speedup they allow)"
CORE, DRAFT_CORE = "tensorrt_llm", "tensorrt_llm_draft"
FORMULA = "limit = AL x t(1) / (t(verify) + t(draft))"


def served_cores(ctx: SuiteContext) -> dict[str, dict] | str:
    """The core model configs the costs are measured from ({"target", "baseline"[, "draft"]}), or why not."""
    configs: dict[str, dict] = {}
    try:
        configs["target"] = ctx.target.server.config(CORE)
        configs["baseline"] = ctx.baseline.server.config(CORE)
        index = {m.get("name") for m in ctx.target.server.repository_index()}
        if DRAFT_CORE in index:
            configs["draft"] = ctx.target.server.config(DRAFT_CORE)
    except Exception as e:  # noqa: BLE001 - a server that answers no config: nothing to measure from
        return f"the servers did not give the {CORE} configs ({type(e).__name__}: {e})"
    for role, config in configs.items():
        folder = parameter(config, "gpt_model_path")
        if folder is None:
            return f"the {role} core names no engine folder (gpt_model_path): an llm-api deployment"
        if not os.path.isdir(folder):
            return f"the {role} core's engine folder {folder} is not on this machine"
    if parameter(configs["target"], "tokenizer_dir") is None:
        return "the speculative core names no tokenizer_dir"
    return configs


def served_speedups(ctx: SuiteContext) -> dict[int, float]:
    """The performance check's median speedup per level (served), when it ran in this suite."""
    perf = ctx.finished.get("performance")
    points = (perf.details.get("speedup") or []) if perf is not None else []
    return {int(p["concurrency"]): p["speedup"] for p in points if p.get("speedup") is not None}


def summary_text(models) -> str:
    parts = []
    for m in models:
        if m.limit is None:
            continue
        text = f"limit {m.limit:.2f}× at {m.concurrency} (in process {m.in_process:.2f}×"
        if m.served is not None:
            text += f", served {m.served:.2f}× = {m.share(m.served):.2f} of it"
        parts.append(text + ")")
    return "; ".join(parts) or "no level had a cost to compare"


@timed
def run(ctx: SuiteContext) -> CheckResult:
    if not ctx.spec.speculative or ctx.baseline is None:
        return CheckResult(NAME, TITLE, SKIPPED, "needs a speculative deployment and its baseline")
    configs = served_cores(ctx)
    if isinstance(configs, str):
        return CheckResult(NAME, TITLE, SKIPPED, f"per-call costs not measured: {configs}")
    levels = sorted(set(ctx.recipe.validation.concurrency))
    max_tokens = ctx.options.perf_max_tokens or ctx.recipe.validation.max_tokens
    runtime = ctx.runtime
    models = runtime.call_costs(
        configs,
        [p.text for p in ctx.prompts],
        max_tokens,
        levels,
        progress=lambda stage: ctx.progress(f"cost model: {stage}", 0, 0),
    )
    if models is None:
        return CheckResult(
            NAME, TITLE, SKIPPED, f"the {runtime.name} runtime's per-call costs are not measured in process"
        )
    served = served_speedups(ctx)
    models = [replace(m, served=served.get(m.concurrency)) for m in models]
    details = {
        "formula": FORMULA,
        "levels": [m.to_dict() for m in models],
        "max_tokens": max_tokens,
        "definitions": {
            "t1_ms": "the target's forward in an autoregressive step (the baseline engine), ms",
            "verify_ms": "the target's forward in a speculative step (drafts verified), ms",
            "draft_ms": "one step's drafting call (draft model, heads and the drafter's own work; 0: drafts "
            "from a lookup), ms",
            "acceptance_length": "AL of the timed steps (bonus token included)",
            "in_process": "baseline time / speculative time of the same in-process runs (median of rounds)",
            "served": "the performance check's median speedup at this level",
            "share_of_limit": "measured / limit",
        },
        "measured": "the served engines decoded in this process, greedy, one torch thread, steps of exactly "
        "`concurrency` requests",
    }
    return CheckResult(NAME, TITLE, PASSED, summary_text(models), details)
