"""The whole plan of a resolved recipe: its runtime's engine steps, the repositories, the step that writes its
deployment bundle (specbuild.deploy), serving and validation, as the typed steps of specbuild.plan, composed here,
above the runtimes and the deploy package, so that the plan reaches neither.

    plan = plan_build(build, layout)    # what `specbuild plan` prints and `specbuild compile` executes
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from specbuild.checkpoints.hub import checkpoint_fields
from specbuild.deploy.bundle import deploy_step
from specbuild.files.paths import show
from specbuild.plan import DeployStep, Layout, Outputs, Plan, RepositoryStep, Step, ValidateStep, repository_roles
from specbuild.recipe.schema import Recipe
from specbuild.runtimes.build import Build


def plan_build(build: Build, layout: Layout) -> Plan:
    return make_plan(build, layout, deploy_step(build, layout))


def make_plan(build: Build, layout: Layout, bundle: DeployStep | str) -> Plan:
    """The plan of a resolved recipe (specbuild.runtimes.build), built with its options. `bundle`: the step that
    writes its deployment bundle, or why it gets none (specbuild.deploy.bundle.deploy_step)."""
    recipe, runtime, spec, options = build.recipe, build.runtime, build.spec, build.options
    steps: list[Step] = list(runtime.engine_steps(recipe, spec, build.roles, layout, options))
    repo_roles = repository_roles(recipe)
    for role in repo_roles:
        steps.append(
            RepositoryStep(
                role=role, path=layout.repository(role), info=runtime.repository_info(recipe, spec, layout, role)
            )
        )
    if isinstance(bundle, DeployStep):
        steps.append(bundle)
    steps.append(runtime.serve_step(recipe, spec, layout, repo_roles))
    steps.append(ValidateStep(report=layout.report, info=_validation_info(recipe)))
    outputs = Outputs(
        engines={role: show(layout.engine(role)) for role in runtime.engine_roles(recipe, spec)},
        repository=show(layout.repository()),
        baseline_repository=show(layout.repository("baseline")) if recipe.builds_baseline else None,
        report=show(layout.report),
        deployment_bundle=show(bundle.folder) if isinstance(bundle, DeployStep) else f"none: {bundle}",
    )
    return Plan(
        recipe=show(recipe.source) if recipe.source else "<recipe>",
        name=recipe.name,
        runtime=recipe.runtime,
        method=build.method.name,
        outputs=outputs,
        steps=steps,
        flavour=recipe.flavour,
        checkpoints=_checkpoints(recipe),
    )


def _checkpoints(recipe: Recipe) -> dict[str, dict]:
    """Every checkpoint field with the folder it resolved to (model ids: the revision, commit and snapshot)."""
    out = {}
    for name, value in checkpoint_fields(recipe):
        resolved = recipe.checkpoint(value).describe()
        out[name] = {**resolved, "path": show(resolved["path"])}
    return out


def _validation_info(recipe: Recipe) -> dict[str, Any]:
    v = recipe.validation
    gates: dict[str, Any] = {"require_lossless": v.require_lossless}
    if v.min_acceptance_length is not None:
        gates["min_acceptance_length"] = v.min_acceptance_length
    if v.min_speedup is not None:
        gates["min_speedup"] = v.min_speedup
    info: dict[str, Any] = {
        "prompts": show(recipe.resolve(v.prompts))
        if isinstance(v.prompts, Path)
        else (f"{len(v.prompts)} inline" if v.prompts else "the bundled prompt set"),
        "max_tokens": v.max_tokens,
        "concurrency": v.concurrency,
        "gates": gates,
    }
    if v.sampling is not None:
        info["sampling"] = v.sampling.model_dump()
    return info


__all__ = ["make_plan", "plan_build"]
