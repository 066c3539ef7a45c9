"""Client-side validation of a served specbuild deployment: checks, metrics and reports.

Public API (used by `specbuild validate` and `specbuild compile`):

    run_validation(build, target: Endpoints, baseline: Endpoints | None = None, *, report_dir=None,
                   progress=None, options=None) -> ValidationResult
    Endpoints(http="host:port", grpc="host:port" | None, model=None)
    SuiteOptions(...)          # shorter runs: checks=, requests_per_level=, load_seconds=, ...
    ValidationResult.passed, .checks (list[CheckResult]), .failures, .to_dict(), .report_files

Light at import: tritonclient, numpy and matplotlib are imported only when the suite runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from specbuild.validate.checks.base import CheckResult, SuiteOptions
from specbuild.validate.endpoints import Endpoints, parse_hostport
from specbuild.validate.result import ValidationResult

if TYPE_CHECKING:
    from specbuild.validate.suite import run_validation

__all__ = ["CheckResult", "Endpoints", "SuiteOptions", "ValidationResult", "parse_hostport", "run_validation"]


def __getattr__(name: str):
    if name == "run_validation":
        from specbuild.validate.suite import run_validation

        return run_validation
    raise AttributeError(name)
