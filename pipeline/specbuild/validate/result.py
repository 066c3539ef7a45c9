"""What one run of the validation suite found (`run_validation`'s result; the reports are written from it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from specbuild.validate.checks.base import WARNED, CheckResult
from specbuild.validate.endpoints import Endpoints


@dataclass
class ValidationResult:
    """What `run_validation` found. `passed` is True when no check failed or errored (every gate holds)."""

    recipe: str
    method: str
    runtime: str
    target: Endpoints
    baseline: Endpoints | None
    serving_model: str
    checks: list[CheckResult]
    started: str
    duration_s: float
    prompts: int
    report_files: list[Path] = field(default_factory=list)
    gates: dict = field(default_factory=dict)
    contract: str = "engine"  # the serving model's request/response contract (Runtime.contract)
    prompt_format: dict | None = None  # PromptFormat.to_dict(): chat template applied or raw, and why
    tokenizer: dict | None = None  # {"folder", "reader"}, or {"problem"}: the client's tokenizer, or why none
    build: dict | None = None  # compare.build_identity: recipe hash, checkpoints, tool and server versions
    against: dict | None = None  # the earlier report compared with: {"report", "changes": [...]} (--against)
    prompt_set: dict | None = None  # {"source", "categories": {name: prompts}, "left_out": [LeftOut.to_dict()]}
    reused: bool = False  # read back from an earlier run's report.json (compile reusing its verdict): `started` and
    # `duration_s` are that run's

    @property
    def passed(self) -> bool:
        return all(c.ok for c in self.checks)

    @property
    def failures(self) -> list[CheckResult]:
        """The checks that fail the run: failed, error, and inconclusive unless the recipe allows it."""
        return [c for c in self.checks if not c.ok]

    @property
    def warnings(self) -> list[CheckResult]:
        """The checks that passed with a warning (e.g. slower than the baseline at concurrency 1): the verdict
        shows them; they do not fail the run."""
        return [c for c in self.checks if c.status == WARNED]

    def check(self, name: str) -> CheckResult | None:
        return next((c for c in self.checks if c.name == name), None)

    def to_dict(self) -> dict:
        return {
            "specbuild_validation_report": 1,
            "recipe": self.recipe,
            "method": self.method,
            "runtime": self.runtime,
            "passed": self.passed,
            "warnings": [f"{c.name}: {c.summary}" for c in self.warnings],
            "started": self.started,
            "duration_s": round(self.duration_s, 3),
            "prompts": self.prompts,
            "target": self.target.to_dict(),
            "baseline": self.baseline.to_dict() if self.baseline else None,
            "serving_model": self.serving_model,
            "contract": self.contract,
            "gates": self.gates,
            "prompt_format": self.prompt_format,
            "tokenizer": self.tokenizer,
            "prompt_set": self.prompt_set,
            "build": self.build,
            "against": self.against,
            "checks": [c.to_dict() for c in self.checks],
        }
