"""The plan: the ordered, typed steps `specbuild compile` takes for a recipe. Pure: it reads the recipe, runs nothing.

specbuild.planning.plan_build asks the recipe's runtime for its engine steps, then adds the repository, deploy,
serve and validate steps (the deploy step made by specbuild/deploy/): the plan knows nothing of the bundle but the
step, and nothing of the runtimes but the steps they make.
`Plan.render()` is what `specbuild plan` prints; `compile` executes the same step objects, reading their fields
(never their display text). Every command line is written with every relevant flag explicit, because defaults
drift between TensorRT-LLM versions (tensorrt_llm/commands/build.py; docs/gpu.md).
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from specbuild.facts.engine_facts import EngineLimits
from specbuild.files.paths import show

if TYPE_CHECKING:
    from specbuild.recipe.schema import Recipe

ROLES_DOC = {"target": "the serving engine", "draft": "the draft engine", "baseline": "the target without speculation"}


@dataclass(frozen=True)
class Layout:
    """Where a compile writes (design contract "Output folders")."""

    engines_root: Path
    repo_root: Path
    report_root: Path
    name: str

    def engine(self, role: str) -> Path:
        return self.engines_root / self.name / role

    def checkpoint(self, role: str) -> Path:
        return self.engines_root / self.name / "checkpoints" / role

    @property
    def logs(self) -> Path:
        return self.engines_root / self.name / "logs"

    def repository(self, role: str = "target") -> Path:
        return self.repo_root / (self.name if role == "target" else f"{self.name}-{role}")

    @property
    def report(self) -> Path:
        return self.report_root / self.name


# --- steps ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Step:
    """One step of a compile. Subclasses carry typed fields; `title`, `command` and `details` are for people."""

    kind: ClassVar[str]
    role: str | None = None

    def title(self) -> str:
        raise NotImplementedError

    def command(self) -> list[str] | None:
        return None

    def details(self) -> dict[str, Any]:
        return {}

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "title": self.title(),
            "role": self.role,
            "command": self.command(),
            "details": self.details(),
        }


def limits_dict(limits: EngineLimits) -> dict[str, int]:
    return limits.as_build_config()


@dataclass(frozen=True, kw_only=True)
class VerifyEngineStep(Step):
    """Read an engine's config.json back and compare it with the recipe (engine_facts.verify_engine)."""

    kind: ClassVar[str] = "verify-engine"
    engine: Path
    recipe_name: str
    expect: EngineLimits

    def title(self) -> str:
        return f"read back engines/{self.recipe_name}/{self.role}/config.json and compare with the recipe"

    def details(self) -> dict[str, Any]:
        return {"expect": limits_dict(self.expect)}


@dataclass(frozen=True, kw_only=True)
class RepositoryStep(Step):
    kind: ClassVar[str] = "repository"
    path: Path
    info: dict[str, Any] = field(default_factory=dict)  # what the models serve (display only)

    def title(self) -> str:
        return f"write the Triton repository {show(self.path)}"

    def details(self) -> dict[str, Any]:
        return self.info


@dataclass(frozen=True, kw_only=True)
class DeployStep(Step):
    """Write the deployment bundle (Kubernetes + Slurm) beside the repository (specbuild/deploy/)."""

    kind: ClassVar[str] = "deploy"
    folder: Path
    info: dict[str, Any] = field(default_factory=dict)

    def title(self) -> str:
        return f"write the deployment bundle {show(self.folder)}"

    def details(self) -> dict[str, Any]:
        return self.info


@dataclass(frozen=True, kw_only=True)
class ServeStep(Step):
    kind: ClassVar[str] = "serve"
    headline: str
    argv: tuple[str, ...]
    info: dict[str, Any] = field(default_factory=dict)

    def title(self) -> str:
        return self.headline

    def command(self) -> list[str]:
        return list(self.argv)

    def details(self) -> dict[str, Any]:
        return self.info


@dataclass(frozen=True, kw_only=True)
class ValidateStep(Step):
    kind: ClassVar[str] = "validate"
    report: Path
    info: dict[str, Any] = field(default_factory=dict)

    def title(self) -> str:
        return "run the validation suite against the served repository"

    def details(self) -> dict[str, Any]:
        return {**self.info, "report": show(self.report)}


# --- the plan -------------------------------------------------------------------------------------------------


@dataclass
class Outputs:
    engines: dict[str, str]
    repository: str
    baseline_repository: str | None
    report: str
    deployment_bundle: str  # its folder, or "none: <why>"


@dataclass
class Plan:
    recipe: str
    name: str
    runtime: str
    method: str
    outputs: Outputs
    steps: list[Step]
    flavour: str = "engine"
    checkpoints: dict[str, dict] = field(
        default_factory=dict
    )  # field -> what it resolved to (specbuild.checkpoints.hub)

    @property
    def _flavour(self) -> str:
        return "" if self.flavour == "engine" else f" ({self.flavour} flavour)"

    def of(self, kind: type[Step]) -> list:
        return [s for s in self.steps if isinstance(s, kind)]

    @property
    def engine_steps(self) -> list[Step]:
        """The runtime's steps (everything before the repositories), executed by `Runtime.build_engines`."""
        return [s for s in self.steps if not isinstance(s, (RepositoryStep, DeployStep, ServeStep, ValidateStep))]

    def to_dict(self) -> dict:
        return {
            "recipe": self.recipe,
            "name": self.name,
            "runtime": self.runtime,
            "flavour": self.flavour,
            "method": self.method,
            "checkpoints": self.checkpoints,
            "outputs": vars(self.outputs).copy(),
            "steps": [s.to_dict() for s in self.steps],
        }

    def render(self) -> str:
        lines = [
            f"plan for {self.recipe} — {self.name}: {self.method} on the {self.runtime} runtime{self._flavour}",
            "",
        ]
        hub = {k: v for k, v in self.checkpoints.items() if "model_id" in v}
        if hub:  # model ids: the revision and snapshot each resolved to
            lines.append("checkpoints from the Hugging Face hub cache:")
            lines += [
                f"   {k}: {v['model_id']}@{v['revision']} = commit {v['commit']}, {v['path']}" for k, v in hub.items()
            ]
            lines.append("")
        for i, step in enumerate(self.steps, 1):
            lines.append(f"{i}. [{step.kind}] {step.title()}")
            if command := step.command():
                lines.append("   $ " + shlex.join(command))
            for key, value in step.details().items():
                lines.extend(_render_detail(key, value, "   "))
        lines.append("")
        lines.append("outputs:")
        for role, path in self.outputs.engines.items():
            lines.append(f"   engine {role}: {path}")
        lines.append(f"   repository: {self.outputs.repository}")
        if self.outputs.baseline_repository:
            lines.append(f"   baseline repository: {self.outputs.baseline_repository}")
        lines.append(f"   report: {self.outputs.report}")
        lines.append(f"   deployment bundle: {self.outputs.deployment_bundle}")
        return "\n".join(lines) + "\n"


def _render_detail(key: str, value: Any, indent: str) -> list[str]:
    if isinstance(value, dict):
        out = [f"{indent}{key}:"]
        for k, v in value.items():
            out.extend(_render_detail(k, v, indent + "  "))
        return out
    if isinstance(value, list) and value and all(isinstance(v, list) for v in value):
        return [f"{indent}{key}: {len(value)} paths {json.dumps(value[:4])}{' ...' if len(value) > 4 else ''}"]
    return [f"{indent}{key}: {value if isinstance(value, str) else json.dumps(value)}"]


def repository_roles(recipe: Recipe) -> list[str]:
    return ["target"] + (["baseline"] if recipe.builds_baseline else [])
