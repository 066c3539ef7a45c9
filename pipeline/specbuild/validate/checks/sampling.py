"""Sampling (temperature > 0): the joint distribution of the first few generated tokens, over many seeds, is the
same for the speculative and the baseline deployment — speculative sampling must not change the distribution.

Pearson's chi-square test of homogeneity (rare outcomes pooled, see stattests), failing when
p < validation.sampling.significance. The two deployments get disjoint seed ranges, so their samples are
independent as the test assumes.
"""

from __future__ import annotations

from specbuild.validate.checks.base import FAILED, PASSED, SKIPPED, WARNED, CheckResult, SuiteContext, timed
from specbuild.validate.client import GenerateParams
from specbuild.validate.stattests import homogeneity_test

NAME, TITLE = "sampling", "Sampling distribution vs baseline (T > 0)"
BASELINE_SEED_OFFSET = 1_000_003


@timed
def run(ctx: SuiteContext) -> CheckResult:
    cfg = ctx.recipe.validation.sampling
    if cfg is None:
        return CheckResult(NAME, TITLE, SKIPPED, "not requested (validation.sampling is not set)")
    gate = f"validation.sampling: p >= {cfg.significance}"
    refusal = ctx.runtime.sampling_refusal(ctx.spec)
    if refusal is not None:
        return CheckResult(NAME, TITLE, SKIPPED, refusal, gate=gate)
    if ctx.baseline is None:
        return CheckResult(NAME, TITLE, SKIPPED, "no baseline deployment given (--baseline-url)", gate=gate)
    trials = ctx.options.sampling_trials or cfg.trials
    prompt = ctx.prompts[0]

    def params(seed: int) -> GenerateParams:
        return GenerateParams(
            max_tokens=cfg.tokens,
            temperature=cfg.temperature,
            top_k=cfg.top_k,
            top_p=cfg.top_p,
            seed=seed,
            return_perf_metrics=False,
        )

    samples, errors = {}, []
    for dep, offset in ((ctx.target, 0), (ctx.baseline, BASELINE_SEED_OFFSET)):
        jobs = [lambda s=s, d=dep: d.generate(prompt.text, params(offset + s)) for s in range(trials)]
        gens = ctx.run_many(f"sampling: {dep.label}, {trials} seeds", jobs, parallel=max(2, ctx.options.parallel))
        errors += [f"{dep.label}: {g.error}" for g in gens if not g.ok]
        samples[dep.label] = [tuple(g.ids[: cfg.tokens]) if g.ids is not None else g.text for g in gens if g.ok]
    details = {
        "prompt": prompt.id,
        "trials": trials,
        "tokens": cfg.tokens,
        "temperature": cfg.temperature,
        "top_k": cfg.top_k,
        "top_p": cfg.top_p,
        "significance": cfg.significance,
        "test": "Pearson chi-square test of homogeneity, outcomes with expected count < 5 pooled",
    }
    if errors:
        details["errors"] = errors[:10]
        return CheckResult(NAME, TITLE, FAILED, f"{len(errors)} sampling request(s) failed: {errors[0]}", details, gate)
    result = homogeneity_test(samples["speculative"], samples["baseline"])
    details.update(result.to_dict())
    details["distinct_outcomes"] = len(set(samples["speculative"]) | set(samples["baseline"]))
    summary = (
        f"chi-square {result.statistic:.2f} on {result.dof} dof, p = {result.p_value:.3g} "
        f"({'<' if result.p_value < cfg.significance else '>='} {cfg.significance}); "
        f"total variation {result.total_variation:.3f} over {details['distinct_outcomes']} outcomes"
    )
    if result.dof == 0:  # every outcome pooled into one column: the test cannot tell anything apart
        return CheckResult(
            NAME,
            TITLE,
            WARNED,
            f"inconclusive: {trials} seeds spread over {details['distinct_outcomes']} outcomes, none "
            "frequent enough to compare — raise validation.sampling.trials, or lower temperature, "
            "top_k or tokens",
            details,
            gate,
        )
    status = FAILED if result.p_value < cfg.significance else PASSED
    return CheckResult(NAME, TITLE, status, summary, details, gate)
