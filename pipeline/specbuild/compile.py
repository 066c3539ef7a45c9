"""`specbuild compile`: plan -> engines -> repository -> serve -> validate -> report.

It executes the plan's typed steps in order: the runtime's engine steps (`Runtime.build_engines`), then each
`RepositoryStep`, then serves the repositories (through the runtime's launcher where it has one) and validates.
Each stage is done by its own package; this module shows progress and makes sure a server it started is
stopped whatever happens.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from rich.console import Console

from specbuild.plan import DeployStep, Layout, Plan, RepositoryStep, make_plan
from specbuild.recipe.schema import Recipe
from specbuild.runtimes import runtime_for
from specbuild.runtimes.base import BuildOptions
from specbuild.serve.decode_cpus import CHOICE_ENV as DECODE_CPUS_ENV


@dataclass
class CompileOptions:
    validate: bool = True
    trtllm_examples: str | None = None
    tritonserver: Path | None = None
    # serve/decode_cpus.py: CPUs kept for the reference core's decoding thread (--decode-cpus, SPECBUILD_DECODE_CPUS)
    decode_cpus: str = field(default_factory=lambda: os.environ.get(DECODE_CPUS_ENV, "auto"))

    @property
    def build(self) -> BuildOptions:
        return BuildOptions(trtllm_examples=self.trtllm_examples)


class Stages:
    """Prints one line per finished stage and a spinner while a stage runs."""

    def __init__(self, console: Console):
        self.console = console

    @contextlib.contextmanager
    def stage(self, title: str):
        start = time.monotonic()
        with self.console.status(title) as status:
            yield lambda message: status.update(f"{title}: {message}")
        self.console.print(f"[green]✓[/green] {title} [dim]({time.monotonic() - start:.1f} s)[/dim]")

    def notice(self, message: str) -> None:
        self.console.print(f"[yellow]![/yellow] {message}", soft_wrap=True)


def installed_trtllm_version() -> str | None:
    """The installed TensorRT-LLM's version (it picks the bundle's image tag), None when there is none."""
    from specbuild.errors import UserError
    from specbuild.trtllm.version import installed

    try:
        found = installed()
    except UserError:
        return None
    return found.version if found else None


def build_engines(recipe: Recipe, layout: Layout, options: BuildOptions | None = None,
                  progress: Callable[[str], None] | None = None) -> dict[str, Path]:
    """Only the engine stage: the plan's engine steps, run by the recipe's runtime. Returns {role: folder}."""
    plan = make_plan(recipe, layout, options)
    return runtime_for(recipe).build_engines(plan.engine_steps, recipe, layout, progress=progress)


def compile_recipe(recipe: Recipe, layout: Layout, options: CompileOptions, console: Console) -> int:
    plan: Plan = make_plan(recipe, layout, options.build)
    runtime = runtime_for(recipe)
    stages = Stages(console)
    console.print(f"[bold]{recipe.name}[/bold]: {plan.method} on the {plan.runtime} runtime{plan._flavour} "
                  f"({len(plan.steps)} steps; `specbuild plan` shows them)")

    if plan.engine_steps:
        with stages.stage("engines") as progress:
            runtime.build_engines(plan.engine_steps, recipe, layout, progress=progress, notice=stages.notice)

    repositories = plan.of(RepositoryStep)
    for step in repositories:
        with stages.stage(f"repository {step.path}") as progress:
            runtime.write_repository(recipe, layout, step.role, progress=progress, notice=stages.notice)

    bundles = plan.of(DeployStep)
    if bundles:
        from specbuild.deploy.bundle import write_bundle

        with stages.stage(f"deployment bundle {bundles[0].folder}"):
            write_bundle(recipe, layout, folder=bundles[0].folder, trtllm_version=installed_trtllm_version(),
                         notice=stages.notice)

    if not options.validate:
        console.print(f"serve it with: specbuild serve {layout.repository()}", soft_wrap=True)
        return 0
    return serve_and_validate(recipe, layout, {s.role: s.path for s in repositories}, options, stages, console)


def serve_and_validate(recipe: Recipe, layout: Layout, repositories: dict[str, Path], options: CompileOptions,
                       stages: Stages, console: Console) -> int:
    from specbuild.serve import TritonServer, decode_cpus
    from specbuild.serve.server import stop_together
    from specbuild.validate import Endpoints, run_validation

    runtime = runtime_for(recipe)
    with contextlib.ExitStack() as stack:
        servers: dict[str, TritonServer] = {}
        @stack.push
        def _stop(exc_type, exc, tb) -> None:  # whatever ends this block: both stop at once
            # interrupted (Ctrl-C, SIGTERM): the requests in flight are the suite's own, none is worth the exit
            # timeout; otherwise each server finishes its requests first
            interrupted = exc_type is not None and issubclass(exc_type, KeyboardInterrupt)
            stop_together(servers.values(), at_once=interrupted)
        for role, repo in repositories.items():
            with stages.stage(f"serve {repo}"):
                server = TritonServer(repo, binary=options.tritonserver, launcher=runtime.launcher(repo),
                                      log_path=layout.report / f"tritonserver-{role}.log",
                                      decode_cpus=options.decode_cpus)
                servers[role] = server
                server.start()
        baseline = servers.get("baseline")
        # the suite's clients stay off the CPUs kept for the decoders, as tritonserver does
        stack.enter_context(decode_cpus.running_on(servers["target"].client_cpus))
        result = run_validation(
            recipe,
            Endpoints.of(servers["target"]),
            Endpoints.of(baseline) if baseline else None,
            report_dir=layout.report,
            console=console,
            exit_reasons={role: server.exit_reason for role, server in servers.items()},
        )
    console.print(f"report: {layout.report}", soft_wrap=True)
    return 0 if result.passed else 1
