"""`specbuild compile`: plan -> engines -> repository -> serve -> validate -> report.

It executes the plan's typed steps in order: the runtime's engine steps (`Runtime.build_engines`), then each
`RepositoryStep`, then serves the repositories (through the runtime's launcher where it has one) and validates.
A step whose output in place (or in the build cache) was made from the same inputs is reused instead
(specbuild.cache.step_cache, specbuild.cache.step_store).
Each stage is done by its own package; this module shows progress and makes sure a server it started is
stopped whatever happens.

`--render-only` (`render_recipe`) writes the repositories and the deployment bundle from the recipe alone, for
review, into render/<name>/ beside triton_repo/ (never where a build goes), with RENDER_ONLY.md saying what is
missing (the engines, and how they would be built); it builds, serves and validates nothing.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Callable

from rich.console import Console

from specbuild.cache import step_cache
from specbuild.load import load_build
from specbuild.errors import UserError
from specbuild.output.steps import Stages
from specbuild.plan import DeployStep, Layout, Plan, RepositoryStep
from specbuild.planning import plan_build
from specbuild.cache.provenance import make_manifest, stamp
from specbuild.recipe.schema import Recipe
from specbuild.runtimes.base import BuildOptions
from specbuild.runtimes.build import Build
from specbuild.serve.decode_cpus import CHOICE_ENV as DECODE_CPUS_ENV
from specbuild.cache.step_store import Store
from specbuild.serve import TritonServer, decode_cpus
from specbuild.serve.server import stop_together
from specbuild.validate.endpoints import Endpoints
from specbuild.validate.report.terminal import print_result, progress_bar
from specbuild.deploy.bundle import write_bundle
from specbuild.files.paths import show


@dataclass
class CompileOptions:
    validate: bool = True
    render_only: bool = False  # repositories + bundle from the recipe alone, into render/<name>/ (render_recipe)
    trtllm_examples: str | None = None
    tritonserver: Path | None = None
    # serve/decode_cpus.py: CPUs kept for the reference core's decoding thread (--decode-cpus, SPECBUILD_DECODE_CPUS)
    decode_cpus: str = field(default_factory=lambda: os.environ.get(DECODE_CPUS_ENV, "auto"))
    against: Path | None = None  # an earlier report.json the validation compares with (validate --against)
    reuse: bool = (
        True  # reuse engines, repositories or a verdict made from the same inputs (specbuild.cache.step_cache)
    )
    revalidate: bool = False  # serve and validate even when the verdict could be reused
    cache_dir: Path | None = None  # the build cache (specbuild.cache.step_store); None: its default place
    adapt_root: Path = Path("adapt")  # the recipe's adapt section writes adapt/<name>/ (specbuild.adapt)

    @property
    def build(self) -> BuildOptions:
        return BuildOptions(trtllm_examples=self.trtllm_examples)


def build_engines(build: Build, layout: Layout, progress: Callable[[str], None] | None = None) -> dict[str, Path]:
    """Only the engine stage: the plan's engine steps, run by the recipe's runtime. Returns {role: folder}."""
    plan = plan_build(build, layout)
    return build.runtime.build_engines(plan.engine_steps, build.recipe, layout, progress=progress)


def compile_recipe(
    build: Build, layout: Layout, options: CompileOptions, console: Console, stages: Stages | None = None
) -> int:
    """`stages` records the steps run (and the validation's result) for `compile --json`. `build`: the recipe
    resolved with `options.build` (specbuild.load.load_build)."""
    stages = stages or Stages(console)
    if options.render_only:
        return render_recipe(build, layout, options, console, stages)
    build = adapt_first(build, options, stages)
    recipe, runtime = build.recipe, build.runtime
    plan: Plan = plan_build(build, layout)
    console.print(
        f"[bold]{recipe.name}[/bold]: {plan.method} on the {plan.runtime} runtime{plan._flavour} "
        f"({len(plan.steps)} steps; `specbuild plan` shows them)"
    )

    # what every output was made from (specbuild.cache.provenance), identified once
    manifest = make_manifest(recipe, "", Path(), plan=plan.to_dict(), runtime=build.runtime)
    cache = OutputCache(recipe, manifest, stages, options)
    stage_key = None
    if plan.engine_steps:
        stage_key = step_cache.engines_key(
            recipe, manifest, plan.engine_steps, step_cache.written_with(options, runtime)
        )
        engines = {role: (layout.engine(role), step_cache.engine_key(stage_key, role)) for role in plan.outputs.engines}
        if not (engines and cache.reuse_all("engines", engines)):
            with stages.stage("engines") as progress:
                runtime.build_engines(plan.engine_steps, recipe, layout, progress=progress, notice=stages.notice)
            for role, (folder, key) in engines.items():
                cache.built("engine", role, folder, key)

    repositories = plan.of(RepositoryStep)
    keys: dict[str, str] = {}
    for step in repositories:
        keys[step.role] = key = step_cache.repository_key(
            recipe, manifest, step.role, layout, {**step_cache.written_with(options, runtime), "engines": stage_key}
        )
        if cache.reuse_all(f"repository {step.path}", {step.role: (step.path, key)}, kind="repository"):
            continue
        with stages.stage(f"repository {step.path}") as progress:
            runtime.write_repository(recipe, build.spec, layout, step.role, progress=progress, notice=stages.notice)
        cache.built("repository", step.role, step.path, key)

    bundles = plan.of(DeployStep)
    if bundles:
        with stages.stage(f"deployment bundle {bundles[0].folder}"):
            bundle = write_bundle(
                build,
                layout,
                folder=bundles[0].folder,
                trtllm_version=build.runtime.installed_release(),
                notice=stages.notice,
            )
        if bundle is not None:
            stamp(bundle, manifest, "bundle")
    else:  # why not, as plan says it (the reference runtime; an llm-api release no NGC container ships)
        stages.notice(f"no deployment bundle: {plan.outputs.deployment_bundle.removeprefix('none: ')}")

    if not options.validate:
        console.print(f"serve it with: specbuild serve {layout.repository()}", soft_wrap=True)
        return 0
    validation_key = step_cache.validation_key(recipe, keys, step_cache.served_with(options))
    if options.reuse and not options.revalidate:
        if step_cache.passed_before(layout.report, validation_key):
            return step_cache.reuse_verdict(layout.report, stages, console)
        if cache.restore_verdict(layout.report, validation_key):
            return step_cache.reuse_verdict(layout.report, stages, console, restored_from=cache.store.root)
    code = serve_and_validate(
        build, layout, {s.role: s.path for s in repositories}, options, stages, console, manifest, validation_key
    )
    if code == 0:
        cache.store_output("report", None, layout.report, validation_key)
    return code


def adapt_first(build: Build, options: CompileOptions, stages: Stages) -> Build:
    """The recipe's `adapt:` section, run before the engines (specbuild.adapt): the build of the recipe that deploys
    the head the gate chose — DIR/recipe.yaml when the new head shipped, the recipe itself when not (said). A run
    made from the same inputs is reused."""
    if build.recipe.adapt is None:
        return build
    from specbuild.adapt.run import AdaptOptions, run_adapt  # torch, numpy: only recipes that adapt need them

    out = (options.adapt_root / build.recipe.name).absolute()
    with stages.stage(f"adapt {out}") as progress:
        result = run_adapt(
            build, AdaptOptions(out=out, cache_dir=options.cache_dir, reuse=options.reuse), progress, stages.notice
        )
    if result.reused:
        stages.reused(
            f"adapt {out}", "made from the same recipe, traffic, checkpoints and code; --no-cache adapts again"
        )
    if not result.shipped:
        stages.notice(f"adapt: {result.reason}")
        return build
    stages.notice(f"adapt: {result.reason}; building {result.recipe}")
    return load_build(result.recipe, options=build.options)


class OutputCache:
    """A compile's engine folders and repositories: reused in place, restored from the build cache
    (specbuild.cache.step_store), or built and then stored there; each stamped with its provenance and step key."""

    def __init__(self, recipe: Recipe, manifest: dict, stages: Stages, options: CompileOptions):
        self.recipe, self.manifest, self.stages = recipe, manifest, stages
        self.reuse = options.reuse
        self.store = Store(options.cache_dir) if options.reuse else None

    def _stamp(self, kind: str, folder: Path, key: str, content: str | None = None) -> None:
        record = step_cache.step_record(key, folder, content)
        stamp(folder, {**self.manifest, "step": record}, kind)

    def reuse_all(self, title: str, outputs: dict[str, tuple[Path, str]], kind: str = "engine") -> bool:
        """Reuse every output {role: (folder, key)} (in place, else restored from the cache), or none: False when
        one of them is neither in place nor in the cache (the step runs)."""
        if not self.reuse:
            return False
        in_place = {role: step_cache.reusable(folder, key) for role, (folder, key) in outputs.items()}
        cached = {role: self.store.lookup(key) for role, (folder, key) in outputs.items() if not in_place[role]}
        if not all(cached.values()):
            return False

        for role, entry in cached.items():
            folder, key = outputs[role]
            try:
                self._stamp(kind, folder, key, self.store.restore(entry, folder))
            except (UserError, OSError) as e:
                self.stages.notice(f"could not restore {folder} from the build cache ({e}): building it")
                return False
        if cached:
            self.stages.reused(
                title,
                f"restored from the build cache {self.store.root} "
                "(made from the same inputs); --no-cache builds it again",
            )
        else:
            self.stages.reused(title, "nothing it is made from changed")
        return True

    def restore_verdict(self, report: Path, key: str) -> bool:
        """A passing verdict of these inputs put back at `report` from the build cache (False: none is stored)."""
        entry = self.store.lookup(key) if self.store is not None else None
        if entry is None:
            return False
        try:
            self._stamp("report", report, key, self.store.restore(entry, report))
        except (UserError, OSError) as e:
            self.stages.notice(f"could not restore {report} from the build cache ({e}): validating again")
            return False
        return step_cache.passed_before(report, key)

    def built(self, kind: str, role: str, folder: Path, key: str) -> None:
        """Stamp a freshly built output and store it in the cache (a cache that cannot be written is said, not
        fatal: the output in place is whole)."""

        if not Path(folder).is_dir():
            return
        self._stamp(kind, folder, key)
        self.store_output(kind, role, folder, key)

    def store_output(self, kind: str, role: str | None, folder: Path, key: str) -> None:
        """Keep a stamped output in the build cache (a passing report too: a failed verdict is never reused)."""
        if self.store is None:
            return
        try:
            self.store.put(key, folder, step=kind, recipe=self.recipe.name, role=role)
        except (UserError, OSError) as e:
            self.stages.notice(f"not stored in the build cache: {e}")


RENDER_NOTE = "RENDER_ONLY.md"


def render_layout(layout: Layout) -> Layout:
    """Where --render-only writes: render/<name>/triton_repo/ and render/<name>/deploy/ beside triton_repo/. The
    engines keep their place: the rendered config.pbtxt files name the folders a real compile builds."""
    root = Path(layout.repo_root).absolute().parent / "render" / layout.name
    return Layout(layout.engines_root, root / "triton_repo", root / "reports", layout.name)


def render_root(layout: Layout) -> Path:
    return Path(layout.repo_root).parent


def render_note(build: Build, plan: Plan, layout: Layout, written: list[Path], said: list[str]) -> str:
    """RENDER_ONLY.md: what was rendered, what is missing, and how the real build differs."""
    recipe, runtime = build.recipe, build.runtime
    engines = [layout.engine(role) for role in runtime.engine_roles(recipe, build.spec)]
    lines = [
        f"# {recipe.name}: rendered for review — NOT a build",
        "",
        f"`specbuild compile --render-only {recipe.source or ''}` wrote these from the recipe alone "
        f"({plan.method} on the {plan.runtime} runtime{plan._flavour}):",
        "",
    ]
    lines += [f"- `{show(path)}`" for path in written]
    lines += ["", "## Missing", ""]
    if engines:
        lines += [
            "No engines were built. The repositories' config.pbtxt files name these engine folders, which a "
            "real compile writes; tritonserver cannot load the repositories until they exist:",
            "",
        ]
        lines += [f"- `{show(path)}`" for path in engines]
        lines += ["", "The steps that build them (`specbuild plan` shows them in full):", ""]
        for step in plan.engine_steps:
            command = step.command()
            lines.append(f"- {step.title()}" + (f": `{shlex.join(command)}`" if command else ""))
    else:
        lines += ["No engines: this flavour builds none (the LLM loads the checkpoints that model.yaml names)."]
    if said:
        lines += ["", "Said while rendering:", "", *(f"- {message}" for message in said)]
    notes = runtime.notes(recipe, build.spec)
    if notes:
        lines += ["", "## Not known", "", *(f"- {note}" for note in notes)]
    lines += [
        "",
        "Nothing was served or validated. Build, serve and validate for real with "
        f"`specbuild compile {recipe.source or '<recipe>'}` on the GPU machine (`specbuild doctor --recipe` "
        "says what it needs).",
    ]
    return "\n".join(lines) + "\n"


def render_recipe(
    build: Build, layout: Layout, options: CompileOptions, console: Console, stages: Stages | None = None
) -> int:
    """compile --render-only: every repository and the bundle, written under render/<name>/ with RENDER_ONLY.md;
    on failure render/<name>/ is removed (it holds nothing else)."""
    recipe, runtime = build.recipe, build.runtime
    target = render_layout(layout)
    plan: Plan = plan_build(build, target)
    stages = stages or Stages(console)
    root = render_root(target)
    console.print(
        f"[bold]{recipe.name}[/bold]: rendering the repositories and bundle of {plan.method} on the "
        f"{plan.runtime} runtime{plan._flavour} for review into {show(root)} (no engines are built, "
        "nothing is served)",
        soft_wrap=True,
    )
    written: list[Path] = []
    said: list[str] = []

    def notice(message: str) -> None:
        said.append(message)
        stages.notice(message)

    try:
        for step in plan.of(RepositoryStep):
            with stages.stage(f"repository {step.path} (rendered)") as progress:
                written.append(
                    runtime.write_repository(
                        recipe, build.spec, target, step.role, progress=progress, notice=notice, engines_built=False
                    )
                )
        bundles = plan.of(DeployStep)
        if bundles:
            with stages.stage(f"deployment bundle {bundles[0].folder} (rendered)"):
                written.append(
                    write_bundle(
                        build,
                        target,
                        folder=bundles[0].folder,
                        trtllm_version=build.runtime.installed_release(),
                        notice=notice,
                    )
                )
        partial = root / f".{RENDER_NOTE}.partial-{os.getpid()}"
        partial.write_text(render_note(build, plan, target, written, said))
        os.replace(partial, root / RENDER_NOTE)
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
    engines = [show(target.engine(role)) for role in runtime.engine_roles(recipe, build.spec)]
    console.print(
        f"[yellow]rendered for review only[/yellow]: {show(root / RENDER_NOTE)} says what is missing"
        + (f" (no engines: {', '.join(engines)})" if engines else "")
        + "; not servable as is",
        soft_wrap=True,
    )
    return 0


def serve_and_validate(
    build: Build,
    layout: Layout,
    repositories: dict[str, Path],
    options: CompileOptions,
    stages: Stages,
    console: Console,
    manifest: dict | None = None,
    validation_key: str | None = None,
) -> int:
    from specbuild.validate.suite import run_validation  # the suite's statistics need numpy

    recipe, runtime = build.recipe, build.runtime
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
                server = TritonServer(
                    repo,
                    binary=options.tritonserver,
                    launcher=runtime.launcher(repo),
                    log_path=layout.report / f"tritonserver-{role}.log",
                    decode_cpus=options.decode_cpus,
                )
                servers[role] = server
                server.start()
        baseline = servers.get("baseline")
        # the suite's clients stay off the CPUs kept for the decoders, as tritonserver does
        stack.enter_context(decode_cpus.running_on(servers["target"].client_cpus))
        with stages.stage("validate", spinner=False) as progress:
            validate = partial(
                run_validation,
                build,
                Endpoints.of(servers["target"]),
                Endpoints.of(baseline) if baseline else None,
                report_dir=layout.report,
                exit_reasons={role: server.exit_reason for role, server in servers.items()},
                against=options.against,
            )
            if stages.live:  # a terminal: the suite's progress bar
                with progress_bar(console) as bar:
                    result = validate(progress=bar)
            else:  # a log: the steady progress lines, with the suite's stage
                result = validate(progress=lambda stage, done, total: progress(f"{stage} {done}/{total or '?'}"))
        stages.validation = result
        print_result(result, console)
    manifest = manifest or make_manifest(recipe, "", Path(), runtime=runtime)
    if validation_key is not None:
        manifest = {**manifest, "step": step_cache.step_record(validation_key, layout.report)}
    stamp(layout.report, manifest, "report")
    console.print(f"report: {layout.report}", soft_wrap=True)
    return 0 if result.passed else 1
