"""The one JSON shape every `--json` prints (check, plan, compile, validate, doctor): docs/machine-output.md.

    {
      "format": 1,                       # this shape's version
      "command": "compile",              # which command printed it
      "specbuild_version": "0.1.0",
      "verdict": "passed",               # the command's outcome in one word (per command: docs/machine-output.md)
      "exit_code": 0,                    # the process's exit code
      "steps":    [{"name", "status", "duration_s", ...}],
      "findings": [{"severity": "error|warning|note", "message", "file", "line", "col", "field", "fix"}],
      "outputs":  {"engines": {role: path}, "repository", "baseline_repository", "report", "deployment_bundle"},
      ...                                # the command's own keys (plan's steps' commands, validate's checks, ...)
    }

Every key above is always present (an empty list or object where a command has none); a command's own keys are
added beside them and never replace them.
"""

from __future__ import annotations

from typing import Any, Iterable

from specbuild import __version__
from specbuild.errors import Problem, RecipeError, UserError

FORMAT = 1
SEVERITIES = ("error", "warning", "note")
WARNING_PREFIX = "warning: "


def finding(
    severity: str,
    message: str,
    *,
    file: str | None = None,
    line: int | None = None,
    col: int | None = None,
    field: str | None = None,
    fix: str | None = None,
) -> dict[str, Any]:
    assert severity in SEVERITIES, severity
    return {
        "severity": severity,
        "message": message,
        "file": file,
        "line": line,
        "col": col,
        "field": field or None,
        "fix": fix,
    }


def problem_finding(problem: Problem) -> dict[str, Any]:
    """A located recipe problem; a warning (its message starts with `warning: `) keeps its place."""
    warning = problem.message.startswith(WARNING_PREFIX)
    message = problem.message.removeprefix(WARNING_PREFIX) if warning else problem.message
    return finding(
        "warning" if warning else "error",
        message,
        file=problem.file,
        line=problem.line,
        col=problem.col,
        field=problem.field,
    )


def error_findings(error: UserError) -> list[dict[str, Any]]:
    """The findings of a user error: each located problem of a recipe's, else the message."""
    if isinstance(error, RecipeError):
        return [problem_finding(p) for p in error.problems]
    return [finding("error", str(error))]


def document(
    command: str,
    *,
    verdict: str,
    exit_code: int,
    steps: Iterable[dict] = (),
    findings: Iterable[dict] = (),
    outputs: dict | None = None,
    **own: Any,
) -> dict[str, Any]:
    """The shared shape; `own` are the command's own keys (they may not replace the shared ones)."""
    doc: dict[str, Any] = {
        "format": FORMAT,
        "command": command,
        "specbuild_version": __version__,
        "verdict": verdict,
        "exit_code": exit_code,
        "steps": list(steps),
        "findings": list(findings),
        "outputs": dict(outputs or {}),
    }
    clash = set(own) & set(doc)
    assert not clash, f"{command}'s own keys replace shared ones: {sorted(clash)}"
    doc.update(own)
    return doc


def outputs_of(plan_outputs: Any) -> dict[str, Any]:
    """plan.Outputs as the shared `outputs` (paths as strings)."""
    raw = vars(plan_outputs)
    out: dict[str, Any] = {}
    for key, value in raw.items():
        if isinstance(value, dict):
            out[key] = {k: str(v) for k, v in value.items()}
        else:
            out[key] = None if value is None else str(value)
    return out
