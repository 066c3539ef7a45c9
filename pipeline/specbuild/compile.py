"""`specbuild compile`: plan -> engines -> repository -> serve -> validate -> report.

Each stage is done by its own package; this module only runs them in order, shows progress and makes sure a
server it started is stopped whatever happens.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from rich.console import Console

from specbuild.errors import UserError
from specbuild.methods import method_for
from specbuild.plan import Layout, Plan, engine_limits, make_plan, roles
from specbuild.recipe.schema import Recipe


@dataclass
class CompileOptions:
    validate: bool = True
    trtllm_examples: str | None = None
    tritonserver: Path | None = None


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


def build_reference_engines(recipe: Recipe, layout: Layout, progress: Callable[[str], None]) -> dict[str, Path]:
    from specbuild.reference.engine_folder import build_engine, read_engine_config

    method = method_for(recipe)
    built = {}
    for role in roles(recipe):
        target_role = role == "target"
        limits = engine_limits(recipe, role)
        # The builder adds max_draft_len (+ EAGLE layers) and raises max_num_tokens itself, as trtllm-build does:
        # give it the recipe's values (max_num_tokens as clipped for a plain engine).
        recipe_limits = dict(limits, max_seq_len=recipe.build.max_seq_len,
                             max_num_tokens=engine_limits(recipe, "baseline")["max_num_tokens"])
        model_dir = recipe.resolve(recipe.speculation.checkpoint) if role == "draft" else recipe.model_dir
        progress(f"{role} engine")
        path = build_engine(
            layout.engine(role), role=role, method=method.name if target_role else "none",
            decoding=method.reference_decoding(recipe) if target_role else {},
            model_dir=model_dir, tokenizer_dir=recipe.tokenizer_dir if role != "draft" else None,
            extra_dirs=method.speculative_dirs(recipe) if target_role else {},
            dtype=recipe.model.dtype, limits=recipe_limits,
            pretrained_extra=method.pretrained_extra(recipe) if target_role else {}, progress=progress)
        check_engine_config(read_engine_config(path), limits, path)
        built[role] = path
    return built


def check_engine_config(config: dict, expected: dict, path: Path) -> None:
    """The engine's build_config must carry what the plan expects (both runtimes write the same shape)."""
    build = config.get("build_config", {})
    wrong = [f"{k}: engine has {build.get(k)!r}, recipe needs {v!r}" for k, v in expected.items() if build.get(k) != v]
    if wrong:
        raise UserError(f"{path}/config.json does not match the recipe — " + "; ".join(wrong) +
                        " — rebuild the engine with this recipe")


def compile_recipe(recipe: Recipe, layout: Layout, options: CompileOptions, console: Console) -> int:
    plan: Plan = make_plan(recipe, layout, trtllm_examples=options.trtllm_examples)
    stages = Stages(console)
    console.print(f"[bold]{recipe.name}[/bold]: {plan.method} on the {recipe.runtime} runtime "
                  f"({len(plan.steps)} steps; `specbuild plan` shows them)")

    with stages.stage("engines") as progress:
        if recipe.runtime == "reference":
            build_reference_engines(recipe, layout, progress)
        else:
            from specbuild.trtllm import build_engines

            build_engines(plan, recipe, layout, progress=progress)

    from specbuild.triton.repository import write_repository

    repo_roles = ["target"] + (["baseline"] if recipe.builds_baseline else [])
    for role in repo_roles:
        with stages.stage(f"repository {layout.repository(role)}") as progress:
            write_repository(recipe, layout, role, progress=progress)

    if not options.validate:
        console.print(f"serve it with: specbuild serve {layout.repository()}", soft_wrap=True)
        return 0
    return serve_and_validate(recipe, layout, options, stages, console)


def serve_and_validate(recipe: Recipe, layout: Layout, options: CompileOptions, stages: Stages,
                       console: Console) -> int:
    from specbuild.serve.tritonserver import TritonServer
    from specbuild.validate import Endpoints, run_validation

    from specbuild.triton.launch import SCRIPT_NAME

    gpu = recipe.runtime != "reference"
    with contextlib.ExitStack() as stack:
        servers = {}
        for role in ["target"] + (["baseline"] if recipe.builds_baseline else []):
            repo = layout.repository(role)
            with stages.stage(f"serve {repo}"):
                # GPU repositories start through their launch script (MPI ranks, orchestrator mode).
                server = TritonServer(repo, binary=options.tritonserver, launcher=repo / SCRIPT_NAME if gpu else None,
                                      log_path=layout.report / f"tritonserver-{role}.log")
                stack.enter_context(server)
                servers[role] = server
        baseline = servers.get("baseline")
        result = run_validation(
            recipe,
            Endpoints.of(servers["target"]),
            Endpoints.of(baseline) if baseline else None,
            report_dir=layout.report,
            console=console,
        )
    console.print(f"report: {layout.report}", soft_wrap=True)
    return 0 if result.passed else 1
