"""Each command's `--json` document in the shared shape (specbuild.output.document, docs/machine-output.md).

Verdicts: check ok | invalid; plan planned; compile passed | failed (validated), built (--no-validate),
rendered (--render-only), error (stopped by a user error); validate passed | failed; doctor ready | not-ready.
"""

from __future__ import annotations

from typing import Any

from specbuild.errors import UserError
from specbuild.output.document import document, error_findings, finding, outputs_of, problem_finding


def _recipe_findings(recipe) -> list[dict[str, Any]]:
    return [problem_finding(w) for w in recipe.warnings] + [finding("note", n) for n in recipe.notes]


def check_document(path, recipe, method, runtime_notes: list[str]) -> dict[str, Any]:
    return document(
        "check",
        verdict="ok",
        exit_code=0,
        recipe=str(path),
        name=recipe.name,
        method=method.name,
        runtime=recipe.runtime,
        flavour=recipe.flavour,
        findings=[*_recipe_findings(recipe), *(finding("note", n) for n in runtime_notes)],
    )


def refused_document(command: str, path, error: UserError, verdict: str) -> dict[str, Any]:
    """What a command prints with --json when a user error stopped it (the error is also on stderr)."""
    return document(
        command, verdict=verdict, exit_code=error.exit_code, recipe=str(path), findings=error_findings(error)
    )


def plan_document(plan, recipe) -> dict[str, Any]:
    """`plan --json`: the plan's own keys (recipe, name, runtime, flavour, method, checkpoints) and its steps,
    each with a `name` and the status `planned` besides its kind, title, role, command and details."""
    own = plan.to_dict()
    steps = [{"name": s["title"], "status": "planned", "duration_s": None, **s} for s in own.pop("steps")]
    outputs = own.pop("outputs")
    return document(
        "plan", verdict="planned", exit_code=0, steps=steps, outputs=outputs, findings=_recipe_findings(recipe), **own
    )


def compile_document(recipe, plan, stages, exit_code: int, *, rendered: bool) -> dict[str, Any]:
    validation = stages.validation
    if rendered:
        verdict = "rendered"
    elif validation is not None:
        verdict = "passed" if validation.passed else "failed"
    else:
        verdict = "failed" if exit_code else "built"
    findings = [*_recipe_findings(recipe), *(finding("note", n) for n in stages.notices)]
    if validation is not None:
        findings += _validation_findings(validation)
    return document(
        "compile",
        verdict=verdict,
        exit_code=exit_code,
        steps=stages.to_list(),
        findings=findings,
        outputs=outputs_of(plan.outputs),
        recipe=plan.recipe,
        name=plan.name,
        method=plan.method,
        runtime=plan.runtime,
        flavour=plan.flavour,
        validation=_validation_summary(validation) if validation is not None else None,
    )


def _validation_findings(result) -> list[dict[str, Any]]:
    out = []
    for c in result.checks:
        if not c.ok:
            out.append(finding("error", c.summary, field=f"validation.{c.name}"))
        elif c.status == "warned":
            out.append(finding("warning", c.summary, field=f"validation.{c.name}"))
    return out


def _validation_summary(result) -> dict[str, Any]:
    return {
        "passed": result.passed,
        "duration_s": round(result.duration_s, 3),
        "started": result.started,
        "reused": result.reused,  # the verdict of an earlier run: its start and duration
        "checks": [{"name": c.name, "status": c.status, "summary": c.summary} for c in result.checks],
        "report_files": [str(p) for p in result.report_files],
    }


def validate_document(result, report: dict[str, Any]) -> dict[str, Any]:
    """`validate --json`: the whole report (report.json's keys: passed, checks, ...) in the shared shape; its
    checks are the steps."""
    steps = [{"name": c.name, "status": c.status, "duration_s": round(c.duration_s, 3)} for c in result.checks]
    outputs = {"report": str(result.report_files[0].parent)} if result.report_files else {}
    return document(
        "validate",
        verdict="passed" if result.passed else "failed",
        exit_code=0 if result.passed else 1,
        steps=steps,
        findings=_validation_findings(result),
        outputs=outputs,
        **report,
    )


def doctor_document(report: dict[str, Any], checks) -> dict[str, Any]:
    """`doctor --json`: {ready, checks} as before, and each warn/fail check as a finding."""
    severity = {"fail": "error", "warn": "warning"}
    findings = [
        finding(severity[c.status], c.detail, field=c.name, fix=c.fix or None) for c in checks if c.status in severity
    ]
    return document(
        "doctor",
        verdict="ready" if report["ready"] else "not-ready",
        exit_code=0 if report["ready"] else 2,
        findings=findings,
        **report,
    )


def adapt_document(path, recipe, stages, result) -> dict[str, Any]:
    """`adapt --json`: shipped (exit 0) or not-shipped (exit 1); its own keys are adapt.json's verdict, the head to
    deploy, the adapted recipe and the whole adapt.json (docs/adapt.md)."""
    return document(
        "adapt",
        verdict="shipped" if result.shipped else "not-shipped",
        exit_code=0 if result.shipped else 1,
        steps=stages.to_list(),
        findings=[*_recipe_findings(recipe), *(finding("note", n) for n in stages.notices)],
        outputs={"adapt": str(result.out)},
        recipe=str(path),
        name=recipe.name,
        shipped=result.shipped,
        reason=result.reason,
        head=str(result.head),
        adapted_recipe=str(result.recipe) if result.recipe else None,
        adapt=result.adapt,
    )
