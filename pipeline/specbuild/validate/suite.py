"""The validation suite: run every check against served deployments and decide whether the recipe's gates hold.

from specbuild.validate import Endpoints, run_validation
result = run_validation(build, Endpoints("127.0.0.1:8000", "127.0.0.1:8001"),
                        baseline=Endpoints("127.0.0.1:9000", "127.0.0.1:9001"), report_dir=Path("reports/demo"))
result.passed, result.checks
"""

from __future__ import annotations

import datetime as _dt
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Mapping

from specbuild.errors import UserError
from specbuild.methods import pack_for
from specbuild.recipe.prompts import prompt_source
from specbuild.validate import compare
from specbuild.validate.checks.order import BY_NAME, CHECKS, ORDER
from specbuild.validate.checks.base import ERROR, PASSED, CheckResult, SuiteOptions
from specbuild.validate.context import close_context, make_context
from specbuild.validate.endpoints import Endpoints
from specbuild.validate.report import write_reports
from specbuild.validate.report.terminal import print_result, progress_bar
from specbuild.validate.result import ValidationResult

if TYPE_CHECKING:
    from specbuild.recipe.schema import Recipe
    from specbuild.runtimes.build import Build


def _prompt_set(recipe: Recipe, ctx) -> dict:
    """Where the prompts came from, how many of each category were sent, those left out (and why), and the record
    keys no format defines (ignored)."""
    categories: dict[str, int] = {}
    for p in ctx.prompts:
        categories[p.category] = categories.get(p.category, 0) + 1
    return {
        "source": prompt_source(recipe),
        "categories": categories,
        "left_out": [o.to_dict() for o in ctx.prompts_left_out],
        "ignored_keys": ctx.prompts_ignored,
    }


def _gates(recipe: Recipe) -> dict:
    v = recipe.validation
    return {
        "require_lossless": v.require_lossless,
        "min_acceptance_length": v.min_acceptance_length,
        "min_speedup": v.min_speedup,
        "sampling_significance": v.sampling.significance if v.sampling is not None else None,
    }


def _preflight(build: Build, baseline: Endpoints | None, options: SuiteOptions) -> None:
    recipe, spec = build.recipe, build.spec
    v = recipe.validation
    if options.checks is not None:
        unknown = [c for c in options.checks if c not in BY_NAME]
        if unknown:
            raise UserError(f"unknown check(s) {', '.join(unknown)} — choose from {', '.join(ORDER)}")
    if not spec.speculative or baseline is not None:
        return
    wanted = set(options.checks) if options.checks is not None else set(ORDER)
    needs = []
    if v.require_lossless and "lossless" in wanted:
        needs.append("validation.require_lossless is true")
    if v.min_speedup is not None and "performance" in wanted:
        needs.append(f"validation.min_speedup is {v.min_speedup}")
    samples = build.runtime.sampling_refusal(spec) is None
    if v.sampling is not None and samples and "sampling" in wanted:
        needs.append("validation.sampling is set")
    if needs:
        raise UserError(
            f"{recipe.source or recipe.name}: {'; '.join(needs)}, which compares with the baseline "
            "deployment — serve triton_repo/<name>-baseline and pass --baseline-url (and "
            "--baseline-grpc-url), or relax those settings in the recipe's validation section"
        )


def _server_down(ctx, exit_reasons: Mapping[str, Callable[[], str | None]]) -> str | None:
    """Why a deployment can no longer be asked (its process ended, or it stopped answering its liveness
    probe), or None when every one answers."""
    for dep in ctx.deployments():
        ended = exit_reasons[dep.role]() if dep.role in exit_reasons else None
        if ended is not None:
            return f"the {dep.label} deployment's {ended}"
        silent = dep.server.unreachable()
        if silent is not None:
            return f"the {dep.label} deployment's server at http://{dep.endpoints.http} stopped answering ({silent})"
    return None


def _run_checks(ctx, checks, exit_reasons: Mapping[str, Callable[[], str | None]]) -> list[CheckResult]:
    """Each check in turn. Once a deployment is down, the check that was running when it went down is an
    error saying so (unless it had passed), and the checks after it are not run."""
    results: list[CheckResult] = []
    down = None
    for check in checks:
        if down is not None:
            results.append(CheckResult(check.NAME, check.TITLE, ERROR, f"not run: {down}"))
            continue
        ctx.progress(check.TITLE, 0, 0)
        result = check.run(ctx)
        down = _server_down(ctx, exit_reasons)
        if down is not None and result.status != PASSED:
            result = replace(result, status=ERROR, summary=f"{down} during this check; {result.summary}")
        results.append(result)
        ctx.finished[check.NAME] = result
    return results


def run_validation(
    build: Build,
    target: Endpoints,
    baseline: Endpoints | None = None,
    *,
    report_dir: Path | None = None,
    progress: Callable[[str, int, int], None] | None = None,
    options: SuiteOptions | None = None,
    console=None,
    exit_reasons: Mapping[str, Callable[[], str | None]] | None = None,
    against: Path | None = None,
) -> ValidationResult:
    """Run the suite against `target` (the speculative deployment) and `baseline` (the same target without
    speculation). UserError for what the user must fix first (unreachable server, missing baseline, bad
    prompt file); check failures are results, not exceptions. Writes the reports when `report_dir` is given.

    progress(stage, done, total) is called as the suite runs. With a rich `console` (and no `progress`), a
    progress bar is shown on it and the result tables are printed on it at the end. `exit_reasons` maps a
    role ("target", "baseline") to a function saying how the process serving it ended (None while it runs),
    for servers this process started: a check during which one ends says so, and the checks after it are not
    run (for any server, one that stops answering is noticed by its liveness probe). `against`: an earlier
    report.json of the same recipe (UserError before anything runs when it is not one): acceptance per category
    and the speedup per level are compared with it (validate/compare.py), each comparison a check of its own."""
    if console is not None and progress is None:
        with progress_bar(console) as bar:
            result = run_validation(
                build,
                target,
                baseline,
                report_dir=report_dir,
                progress=bar,
                options=options,
                exit_reasons=exit_reasons,
                against=against,
            )
        print_result(result, console)
        return result
    options = options or SuiteOptions()
    recipe, spec, runtime = build.recipe, build.spec, build.runtime
    _preflight(build, baseline, options)
    earlier = compare.load_report(Path(against)) if against is not None else None
    started = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    t0 = time.perf_counter()
    ctx = make_context(build, target, baseline, options, progress)
    dep_target = ctx.target
    prompts = ctx.prompts
    tokenizer = (
        {"folder": str(ctx.tokenizer.path), "reader": ctx.tokenizer.reader}
        if ctx.tokenizer is not None
        else {"problem": ctx.tokenizer_problem}
    )
    try:
        wanted = set(options.checks) if options.checks is not None else None
        checks = [c for c in CHECKS if wanted is None or c.NAME in wanted]
        results = _run_checks(ctx, checks, exit_reasons or {})
        servers = {d.role: d.server.server_version() for d in ctx.deployments()}
        identity = compare.build_identity(recipe, servers, build.runtime)
        ran = pack_for(build.spec).runs(build.spec)  # what runs in the method's place (AUTO), for the report
        if ran:
            identity["runs"] = ran
    finally:
        close_context(ctx)
    result = ValidationResult(
        recipe.name,
        spec.method,
        recipe.runtime,
        target,
        baseline,
        dep_target.model,
        results,
        started,
        time.perf_counter() - t0,
        len(prompts),
        gates=_gates(recipe),
        contract=runtime.contract,
        prompt_format=ctx.prompt_format.to_dict(),
        tokenizer=tokenizer,
        prompt_set=_prompt_set(recipe, ctx),
        build=identity,
    )
    if earlier is not None:
        result.checks += compare.against_checks(earlier, result.to_dict(), recipe)
        result.against = {
            "report": str(against),
            "recipe": earlier.get("recipe"),
            "changes": compare.identity_changes(earlier.get("build"), identity),
        }
    if report_dir is not None:
        result.report_files = write_reports(result, Path(report_dir))
    return result
