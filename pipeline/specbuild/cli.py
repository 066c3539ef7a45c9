"""The specbuild command line. Every user error ends with a message that says what to do, and exit code 2."""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path

import click

from specbuild import __version__
from specbuild.errors import UserError
from specbuild.serve.decode_cpus import CHOICE_ENV as DECODE_CPUS_ENV

EXAMPLES_DIR_HELP = (
    "TensorRT-LLM examples/ tree (e.g. /app/examples in the NGC container) whose "
    "convert_checkpoint.py scripts convert Medusa/EAGLE where the wheel API is unreliable"
)


def _recipe_arg():
    return click.argument("recipe", type=click.Path(path_type=Path, dir_okay=False))


def _layout_options(f):
    f = click.option(
        "--engines-dir",
        type=click.Path(path_type=Path, file_okay=False),
        default=Path("engines"),
        show_default=True,
        help="Root of engine folders (engines/<name>/...).",
    )(f)
    f = click.option(
        "--repo-dir",
        type=click.Path(path_type=Path, file_okay=False),
        default=Path("triton_repo"),
        show_default=True,
        help="Root of Triton model repositories (triton_repo/<name>).",
    )(f)
    f = click.option(
        "--report-dir",
        type=click.Path(path_type=Path, file_okay=False),
        default=Path("reports"),
        show_default=True,
        help="Root of validation reports (reports/<name>).",
    )(f)
    return f


def _layout(recipe, engines_dir: Path, repo_dir: Path, report_dir: Path):
    from specbuild.plan import Layout

    return Layout(engines_dir.absolute(), repo_dir.absolute(), report_dir.absolute(), recipe.name)


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(__version__, "--version", prog_name="specbuild")
@click.option("--debug", is_flag=True, help="Show full tracebacks for internal errors.")
@click.option(
    "--log-format",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    envvar="SPECBUILD_LOG_FORMAT",
    help="json: stderr carries one JSON event per line (step started/progress/finished with durations, "
    "warnings, errors) instead of the text for people (docs/machine-output.md).",
)
@click.pass_context
def cli(ctx: click.Context, debug: bool, log_format: str) -> None:
    """Build speculative-decoding LLM deployments for NVIDIA Triton from one YAML recipe.

    \b
    A recipe names a target model, a speculative method (medusa, eagle, eagle3, draft_target, prompt_lookup,
    lookahead, mtp or none), a runtime: tensorrt-llm (NVIDIA GPUs) or reference (CPU, PyTorch), and a
    flavour: engine (trtllm-build engines, TensorRT-LLM <= 1.3.0rc20) or llm-api (model.yaml, TensorRT-LLM 1.0+).
    \b
    Examples:
      specbuild check recipes/reference/eagle.yaml      # validate a recipe
      specbuild plan recipes/tensorrt-llm/medusa.yaml   # show every step and command, run nothing
      specbuild compile recipes/demo.yaml               # engines -> repository -> serve -> validate
    \b
    In CI (docs/machine-output.md): output that is not a terminal fits COLUMNS (160 when unset; tables fold their
    cells, never cut them) and gets a progress line every 15 s during long steps (SPECBUILD_PROGRESS_INTERVAL); NO_COLOR turns colours off;
    --json (check, plan, compile, validate, doctor) prints one JSON document on stdout with the keys format,
    command, verdict, exit_code, steps, findings, outputs; --log-format json turns stderr into JSON events.
    """
    from specbuild.output import events

    ctx.ensure_object(dict)["debug"] = debug
    events.configure(log_format, ctx.invoked_subcommand)


def _examples_option(f):
    return click.option("--trtllm-examples", type=click.Path(file_okay=False), default=None, help=EXAMPLES_DIR_HELP)(f)


def _use_llmapi_model_dir(ctx, param, value: Path | None) -> Path | None:
    """--llmapi-model-dir is $SPECBUILD_LLMAPI_MODEL_DIR for this run (where the llm-api runtime looks first)."""
    if value is not None:
        import os

        from specbuild.trtllm.llmapi_runtime import ENV

        os.environ[ENV] = str(value.absolute())
    return value


def _llmapi_model_dir_option(f):
    return click.option(
        "--llmapi-model-dir",
        type=click.Path(path_type=Path, file_okay=False, exists=True),
        default=None,
        expose_value=False,
        is_eager=True,
        callback=_use_llmapi_model_dir,
        help="llm-api flavour, runtime tensorrt-llm: the folder with NVIDIA's llmapi model.py and helpers.py "
        "(tensorrt_llm/1 of triton_backend/all_models/llmapi/) to copy into the repository (default: "
        "$SPECBUILD_LLMAPI_MODEL_DIR, else the machine's TensorRT-LLM; without any, launch_triton.sh copies them at "
        "start from the container).",
    )(f)


def _check_decode_cpus(ctx, param, value: str) -> str:
    from specbuild.serve import decode_cpus

    try:
        decode_cpus.plan(value, decode_cpus.allowed_cpus(), decode_cpus.torch_threads(), where="--decode-cpus")
    except UserError as e:
        raise click.BadParameter(str(e).removeprefix("--decode-cpus="), ctx=ctx, param=param) from None
    return value


def _decode_cpus_option(f):
    return click.option(
        "--decode-cpus",
        default="auto",
        show_default=True,
        envvar=DECODE_CPUS_ENV,
        metavar="auto|off|IDS",
        callback=_check_decode_cpus,
        help="CPUs kept for the reference core's decoding thread, tritonserver and its other models running on the "
        "rest (auto: the last CPU, when there are two or more; off; or ids such as 3 or 2,3). Only the CPU "
        "reference runtime's core uses it (bench/README.md: 'A CPU for the decoder').",
    )(f)


def _load(recipe: Path, trtllm_examples: str | None = None, *, building: bool = True):
    """The recipe checked and resolved once (specbuild.runtimes.build.Build): every stage gets it from here."""
    from specbuild.load import load_build
    from specbuild.runtimes.base import BuildOptions

    return load_build(
        recipe, check_files=building, options=BuildOptions(trtllm_examples=trtllm_examples, building=building)
    )


def _print_warnings(r) -> None:
    """A recipe's warnings (what lowers acceptance without refusing the build), on stderr, for every command that
    builds or plans from it: a `plan --json` on stdout stays one document."""
    from specbuild.output.events import current

    for warning in r.warnings:
        if current().enabled:
            current().emit(
                "warning",
                message=warning.message.removeprefix("warning: "),
                file=warning.file,
                line=warning.line,
                col=warning.col,
                field=warning.field,
            )
        else:
            click.echo(str(warning), err=True)


def _console(*, stderr: bool = False, soft_wrap: bool = False):
    """A rich console that never cuts a table in a log (specbuild.output.console); stderr is quiet with
    --log-format json (the events replace it)."""
    from specbuild.output.console import make_console
    from specbuild.output.events import current

    return make_console(stderr=stderr, soft_wrap=soft_wrap, quiet=stderr and current().enabled)


_cache_dir_option = click.option(
    "--cache-dir",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    metavar="DIR",
    help="The build cache folder (default: $SPECBUILD_CACHE_DIR/steps, else $XDG_CACHE_HOME/specbuild/steps, else "
    "~/.cache/specbuild/steps).",
)


def _json_option(what: str):
    return click.option(
        "--json",
        "as_json",
        is_flag=True,
        help=f"Print {what} as one JSON document on stdout (docs/machine-output.md: format, command, "
        "verdict, exit_code, steps, findings, outputs, and the command's own keys).",
    )


@contextlib.contextmanager
def _refusals_as_json(command: str, recipe: Path, as_json: bool, verdict: str = "error"):
    """With --json, a user error still prints one document (verdict, findings) before its message on stderr."""
    try:
        yield
    except UserError as e:
        if as_json:
            from specbuild.output.commands import refused_document

            click.echo(json.dumps(refused_document(command, recipe, e, verdict), indent=2))
        raise


@cli.command()
@_recipe_arg()
@_examples_option
@_llmapi_model_dir_option
@_json_option("the verdict, the problems, warnings and notes (findings)")
def check(recipe: Path, trtllm_examples: str | None, as_json: bool) -> None:
    """Check a recipe: schema, every rule upstream's tools enforce, and the files it names.

    \b
    Prints every problem, each as error: file:line:col: field: message — fix, and exits 2 if there is any (an
    unknown method name is read as the closest known one, so the file's other problems show too). Whatever `plan`
    or `compile` would refuse because of the recipe, `check` reports first (give them the same options), the
    prompt set included: it is prepared as the validation suite will send it, with the target's tokenizer.
    Warnings, printed (on stderr) as file:line:col: field: warning: message, refuse nothing and leave the exit
    code 0: a draft head or draft model paired with a target it runs on but that lowers its acceptance (another
    target's name or architecture, rope, a context past the head's training length, dtype, quantization). A pair
    it cannot run on (hidden size, vocabulary, draft-vocabulary maps, lm_head, tokenizer, a draft model shorter
    than build.max_seq_len) is a problem. Then
    `note:` lines say what specbuild cannot vouch for (a TensorRT-LLM release whose rules were not read), which
    facts of the head were checked against the target and which the head does not record, which prompts the suite
    will leave out (longer than build.max_input_len, ...) and which keys of the prompt records it ignores.
    Example:
      specbuild check recipes/reference/medusa.yaml
    """
    with _refusals_as_json("check", recipe, as_json, verdict="invalid"):
        build = _load(recipe, trtllm_examples)
    r, method = build.recipe, build.method
    runtime_notes = build.runtime.notes(r, build.spec)
    if as_json:
        from specbuild.output.commands import check_document

        _print_warnings(r)
        click.echo(json.dumps(check_document(recipe, r, method, runtime_notes), indent=2))
        return
    flavour = "" if r.flavour == "engine" else f" ({r.flavour} flavour)"
    warned = f" with {len(r.warnings)} warning{'s' if len(r.warnings) > 1 else ''}" if r.warnings else ""
    click.echo(f"{recipe}: ok{warned} — {r.name}: {method.name} ({method.summary}) on the {r.runtime} runtime{flavour}")
    _print_warnings(r)
    # what could not be checked on this machine, and what the runtime cannot know
    for note in [*r.notes, *runtime_notes]:
        click.echo(f"{recipe}: note: {note}")


@cli.command()
@_recipe_arg()
@_layout_options
@_json_option("the plan")
@_examples_option
def plan(
    recipe: Path, engines_dir: Path, repo_dir: Path, report_dir: Path, as_json: bool, trtllm_examples: str | None
) -> None:
    """Print the ordered steps a compile would take, with every command line in full. Runs nothing.

    \b
    Example:
      specbuild plan recipes/tensorrt-llm/eagle.yaml --json > plan.json
    """
    from specbuild.planning import plan_build

    with _refusals_as_json("plan", recipe, as_json):
        build = _load(recipe, trtllm_examples)
        r = build.recipe
        _print_warnings(r)
        p = plan_build(build, _layout(r, engines_dir, repo_dir, report_dir))
    if as_json:
        from specbuild.output.commands import plan_document

        click.echo(json.dumps(plan_document(p, r), indent=2))
    else:
        click.echo(p.render(), nl=False)


@cli.command()
@_recipe_arg()
def download(recipe: Path) -> None:
    """Fetch the Hugging Face model ids a recipe names into the local hub cache (the only command that downloads).

    \b
    check, plan and compile resolve model ids offline, in the hub cache (HF_HUB_CACHE or HF_HOME).
    Example:
      specbuild download recipes/tensorrt-llm/llmapi_eagle3.yaml
    """
    from specbuild.checkpoints.hub import fetch_recipe_models
    from specbuild.load import load_build

    for line in fetch_recipe_models(load_build(recipe, check_files=False).recipe):
        click.echo(line)


@cli.command()
def schema() -> None:
    """Print the recipe's JSON Schema (for editor completion and validation).

    \b
    Example (VS Code YAML extension):
      specbuild schema > specbuild.schema.json
      # then add  # yaml-language-server: $schema=specbuild.schema.json  at the top of a recipe
    """
    from specbuild.recipe.schema import Recipe

    click.echo(json.dumps(Recipe.model_json_schema(), indent=2))


@cli.command()
@_recipe_arg()
@_layout_options
@click.option("--no-validate", is_flag=True, help="Stop after writing the repository (do not serve or validate).")
@click.option(
    "--render-only",
    is_flag=True,
    help="Build nothing: write the repositories and the deployment bundle from the recipe alone, for "
    "review, into render/<name>/ beside the repository root, with RENDER_ONLY.md saying what is missing "
    "(the engines). Needs no GPU and no TensorRT-LLM; serves and validates nothing.",
)
@_examples_option
@_llmapi_model_dir_option
@click.option(
    "--tritonserver",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="tritonserver binary to serve with (default: a system one, else nvidia-pytriton's).",
)
@_decode_cpus_option
@click.option(
    "--against",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    metavar="OLD/report.json",
    help="Compare the validation with an earlier run's report (as validate --against).",
)
@_json_option("the steps run with their durations, the outputs, the findings and the verdict")
@click.option(
    "--no-cache",
    "no_cache",
    is_flag=True,
    help="Build the engines, write every repository and validate again, even where an output made from "
    "the same inputs is in place or in the build cache (by default such a step is reused and says so); "
    "nothing is stored in the cache either.",
)
@_cache_dir_option
@click.option(
    "--revalidate",
    is_flag=True,
    help="Serve and validate again even when the passing verdict of the same repositories and recipe is in place.",
)
@click.option(
    "--adapt-dir",
    type=click.Path(path_type=Path, file_okay=False),
    default=Path("adapt"),
    show_default=True,
    help="Root of adapt outputs (adapt/<name>/): where a recipe's adapt section writes the head it ships.",
)
def compile(
    recipe: Path,
    engines_dir: Path,
    repo_dir: Path,
    report_dir: Path,
    no_validate: bool,  # noqa: A001
    render_only: bool,
    trtllm_examples: str | None,
    tritonserver: Path | None,
    decode_cpus: str,
    against: Path | None,
    as_json: bool,
    no_cache: bool,
    revalidate: bool,
    cache_dir: Path | None,
    adapt_dir: Path,
) -> None:
    """Build engines, write the Triton repository, serve it on free loopback ports, validate it, report.

    \b
    Exit code: 0 when every gate of the recipe's validation section holds, 1 when a gate fails, 2 for user errors.
    A recipe with an adapt section adapts its draft first (`specbuild adapt`) into --adapt-dir/<name>/ and builds
    the new head when the gate shipped it, the recipe's own head when not.
    Outputs: engines/<name>/, triton_repo/<name>/ (+ <name>-baseline/), reports/<name>/, each with a
    provenance.json saying what it was made from. Engines, a repository and a passing verdict already in place
    and made from the same inputs are reused; engines and repositories whose folder was deleted or rebuilt from
    other inputs are restored from the build cache (--cache-dir) when it holds them. The output says which
    (--no-cache, --revalidate; `specbuild cache list|prune` manages the cache). What each step is keyed on:
    docs/machine-output.md.
    --json prints one document (steps, findings, outputs, verdict: docs/machine-output.md).
    Examples:
      specbuild compile recipes/demo.yaml
      specbuild compile recipes/tensorrt-llm/eagle.yaml --no-validate --trtllm-examples /app/examples
      specbuild compile recipes/tensorrt-llm/medusa.yaml --render-only     # review on a CPU machine
    """
    from specbuild.compile import CompileOptions, compile_recipe
    from specbuild.output.steps import Stages

    with _refusals_as_json("compile", recipe, as_json):
        build = _load(recipe, trtllm_examples)
    r = build.recipe
    _print_warnings(r)
    if against is not None:  # refused before the build, not after it
        from specbuild.validate.compare import load_report

        load_report(against)
    options = CompileOptions(
        validate=not no_validate,
        render_only=render_only,
        trtllm_examples=trtllm_examples,
        tritonserver=tritonserver,
        decode_cpus=decode_cpus,
        reuse=not no_cache,
        revalidate=revalidate,
        against=against,
        cache_dir=cache_dir,
        adapt_root=adapt_dir,
    )
    layout = _layout(r, engines_dir, repo_dir, report_dir)
    console = _console(stderr=True)
    stages = Stages(console)
    with _refusals_as_json("compile", recipe, as_json):
        code = compile_recipe(build, layout, options, console, stages)
    if as_json:
        from specbuild.compile import render_layout
        from specbuild.output.commands import compile_document
        from specbuild.planning import plan_build

        written = plan_build(build, render_layout(layout) if render_only else layout)
        click.echo(json.dumps(compile_document(r, written, stages, code, rendered=render_only), indent=2))
    if code:
        raise click.exceptions.Exit(code)


@cli.command()
@_recipe_arg()
@click.option(
    "--traffic",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="Your traffic: any file validation.prompts reads (.txt, .jsonl, .json of text, chat, ShareGPT or OpenAI "
    "request records, each with an optional category). Default: adapt.traffic, else validation.prompts.",
)
@click.option(
    "--out",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="The output folder, replaced whole by each run (default: adapt/<name>).",
)
@click.option("--max-steps", type=click.IntRange(0), default=None, help="Optimizer steps at most (0: no training).")
@click.option("--max-minutes", type=click.FloatRange(min=0, min_open=True), default=None, help="Training time at most.")
@click.option("--seed", type=click.IntRange(0, 2**31 - 1), default=None, help="Seeds the split and the training order.")
@click.option("--device", default=None, metavar="auto|cpu|cuda[:N]", help="Where training runs (default auto).")
@click.option(
    "--trainer", type=click.Choice(["specbuild", "modelopt"]), default=None, help="The trainer (default specbuild)."
)
@click.option(
    "--no-cache",
    is_flag=True,
    help="Adapt again even when --out was made from the same inputs, and regenerate the teacher outputs instead of "
    "reusing the build cache's.",
)
@_cache_dir_option
@_json_option("the verdict, with adapt.json under `adapt`")
def adapt(
    recipe: Path,
    traffic: Path | None,
    out: Path | None,
    max_steps: int | None,
    max_minutes: float | None,
    seed: int | None,
    device: str | None,
    trainer: str | None,
    no_cache: bool,
    cache_dir: Path | None,
    as_json: bool,
) -> None:
    """Adapt the draft (EAGLE-1/2 or EAGLE-3 head, Medusa heads, draft model) to your traffic, and ship the new head
    only when it measurably beats the old one.

    \b
    1. split each category of the traffic into train, dev and held-out parts (seeded, by record digest);
    2. the target answers every prompt on the recipe's runtime, with the hidden states the head reads: training
       prompts with their requests' sampling settings when the traffic gives them (seeded), else greedily; the
       held-out part greedily; kept in the build cache, so a rerun regenerates nothing;
    3. train from the current head (the zoo's objective, or --trainer modelopt: NVIDIA Model-Optimizer's EAGLE-3
       training in its own environment), until --max-steps, --max-minutes or early stopping on the dev part;
    4. gate: old and new head decode the held-out part; ship when the paired 95% bootstrap interval of (new - old)
       acceptance length lies above 0, no gated category (20+ records) lies wholly below -adapt.max_category_drop,
       and the answers are unchanged (lossless).
    \b
    Outputs in --out: adapt.json (shipped, reason, head, categories, overall), report.md/json, junit.xml, plots,
    provenance.json; when shipped, head/ (upstream layout) and recipe.yaml (the recipe pointing at it); when not,
    candidate/. Settings: the recipe's adapt section (docs/adapt.md); options here override it.
    Exit code: 0 shipped, 1 not shipped (the old head is kept), 2 for user errors.
    Examples:
      specbuild adapt recipes/demo.yaml --traffic traffic.jsonl --out adapt/demo
      specbuild adapt recipes/demo.yaml --traffic traffic.jsonl --max-steps 0     # ends "not shipped"
    """
    from specbuild.adapt.run import AdaptOptions, run_adapt
    from specbuild.output.steps import Stages

    with _refusals_as_json("adapt", recipe, as_json):
        build = _load(recipe)
    r = build.recipe
    _print_warnings(r)
    console = _console(stderr=True)
    stages = Stages(console)
    options = AdaptOptions(
        out=out if out is not None else Path("adapt") / r.name,
        traffic=traffic,
        overrides={
            "max_steps": max_steps,
            "max_minutes": max_minutes,
            "seed": seed,
            "device": device,
            "trainer": trainer,
        },
        cache_dir=cache_dir,
        reuse=not no_cache,
    )
    with _refusals_as_json("adapt", recipe, as_json), stages.stage("adapt") as progress:
        result = run_adapt(build, options, progress=progress, notice=stages.notice)
    if result.reused:
        stages.reused(
            f"adapt {result.out}", "made from the same recipe, traffic, checkpoints and code; --no-cache adapts again"
        )
    if as_json:
        from specbuild.output.commands import adapt_document

        click.echo(json.dumps(adapt_document(recipe, r, stages, result), indent=2))
    else:
        colour = "green" if result.shipped else "yellow"
        console.print(f"[{colour}]{result.reason}[/{colour}]", soft_wrap=True)
        console.print(f"head: {result.head}", soft_wrap=True)
        if result.recipe is not None:
            console.print(f"deploy it with: specbuild compile {result.recipe}", soft_wrap=True)
        console.print(f"report: {result.out / 'report.md'}", soft_wrap=True)
    if not result.shipped:
        raise click.exceptions.Exit(1)


@cli.group()
def cache() -> None:
    """The build cache: engine folders and repositories stored by what they were made from, which `compile`
    restores instead of building again.

    
    Where: --cache-dir, else $SPECBUILD_CACHE_DIR/steps, else $XDG_CACHE_HOME/specbuild/steps, else
    ~/.cache/specbuild/steps. An entry is used only when its files hash as when they were stored.
    Examples:
      specbuild cache list
      specbuild cache prune --older-than 14d --max-size 200G
      specbuild cache prune --all
    """


def _store(cache_dir: Path | None):
    from specbuild.cache.step_store import Store

    return Store(cache_dir)


@cache.command("list")
@_cache_dir_option
@_json_option("the entries (key, step, recipe, role, size in bytes, created and last used as Unix times, folder)")
def cache_list(cache_dir: Path | None, as_json: bool) -> None:
    """List the entries: key, step, recipe name, role, size and age (since stored or last restored).

    
    Example:
      specbuild cache list --cache-dir /scratch/specbuild-cache
    """
    import time

    from specbuild.cache.step_store import human_duration, human_size

    store = _store(cache_dir)
    entries = sorted(store.entries(), key=lambda e: e.last_used, reverse=True)
    if as_json:
        click.echo(
            json.dumps(
                {
                    "format": 1,
                    "command": "cache list",
                    "cache": str(store.root),
                    "entries": [e.to_dict() for e in entries],
                },
                indent=2,
            )
        )
        return
    if not entries:
        click.echo(f"{store.root}: no entries")
        return
    now = time.time()
    rows = [("KEY", "STEP", "RECIPE", "ROLE", "SIZE", "AGE")]
    rows += [
        (e.key[:16], e.step, e.recipe, e.role or "-", human_size(e.size), human_duration(now - e.last_used))
        for e in entries
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        click.echo("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
    click.echo(f"{len(entries)} entries, {human_size(sum(e.size for e in entries))} in {store.root}")


@cache.command("prune")
@_cache_dir_option
@click.option(
    "--older-than",
    "older_than",
    metavar="AGE",
    default=None,
    help="Remove entries unused (not stored or restored) for longer than AGE: a number with s, m, h, d or w (14d).",
)
@click.option(
    "--max-size",
    "max_size",
    metavar="SIZE",
    default=None,
    help="Then remove the least recently used entries until the rest takes at most SIZE: bytes or a "
    "number with K, M, G or T (200G).",
)
@click.option("--all", "everything", is_flag=True, help="Remove every entry.")
def cache_prune(cache_dir: Path | None, older_than: str | None, max_size: str | None, everything: bool) -> None:
    """Remove entries by age, by total size, or all (and what interrupted runs left half-written).

    
    Example:
      specbuild cache prune --older-than 30d --max-size 500G
    """
    from specbuild.cache.step_store import human_size, parse_duration, parse_size

    if older_than is None and max_size is None and not everything:
        raise click.UsageError(
            "say what to remove: --older-than AGE, --max-size SIZE or --all (`specbuild cache list` shows the entries)"
        )
    try:
        age = None if older_than is None else parse_duration(older_than)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--older-than") from None
    try:
        size = None if max_size is None else parse_size(max_size)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--max-size") from None
    store = _store(cache_dir)
    removed = store.prune(older_than_s=age, max_size=size, everything=everything)
    kept = store.entries()
    click.echo(
        f"removed {len(removed)} entries ({human_size(sum(e.size for e in removed))}); {len(kept)} kept "
        f"({human_size(sum(e.size for e in kept))}) in {store.root}"
    )


def _port(value: int | None) -> int | None:
    return None if value in (None, 0) else value


@cli.command()
@click.argument("repository", type=click.Path(path_type=Path))
@click.option(
    "--tritonserver",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="tritonserver binary (default: /opt/tritonserver, then PATH, then the nvidia-pytriton one).",
)
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address the server binds (loopback by default; 0.0.0.0 exposes it to the network).",
)
@click.option("--http-port", type=click.IntRange(0, 65535), default=8000, show_default=True, help="0: a free port.")
@click.option("--grpc-port", type=click.IntRange(0, 65535), default=8001, show_default=True, help="0: a free port.")
@click.option("--metrics-port", type=click.IntRange(0, 65535), default=8002, show_default=True, help="0: a free port.")
@click.option(
    "--model-control",
    type=click.Choice(["none", "explicit"]),
    default="none",
    show_default=True,
    help="explicit: load only the --load-model models (an ensemble pulls in its steps); the "
    "model-repository API (load/unload) then needs a key that serve generates and prints.",
)
@click.option(
    "--load-model",
    "load_models",
    multiple=True,
    metavar="MODEL",
    help="A model to load with --model-control explicit (repeatable).",
)
@click.option(
    "--log",
    "log_path",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="Server log file (default: a new file in --log-dir; printed).",
)
@click.option(
    "--log-dir",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="Folder for the server's log, one file per start, the newest 10 kept "
    "[default: beside the repository: triton_repo/NAME.logs/].",
)
@click.option(
    "--timeout",
    "timeout_s",
    type=click.FloatRange(min=1),
    default=300.0,
    show_default=True,
    help="Seconds to wait for every model to be ready.",
)
@_decode_cpus_option
def serve(
    repository: Path,
    tritonserver: Path | None,
    host: str,
    http_port: int,
    grpc_port: int,
    metrics_port: int,
    model_control: str,
    load_models: tuple[str, ...],
    log_path: Path | None,
    log_dir: Path | None,
    timeout_s: float,
    decode_cpus: str,
) -> None:
    """Serve a Triton model repository with tritonserver until Ctrl-C.

    \b
    Says where the server's log goes (beside the repository unless --log / --log-dir), waits until every model
    reports ready on its own endpoint (a progress line every 15 s in a log), prints the endpoints, and stops the
    server (by its PID) on Ctrl-C or SIGTERM (exit 0). When a model fails to load it prints each model's error in plain words
    and exits 2.
    Examples:
      specbuild serve triton_repo/demo
      specbuild serve triton_repo/demo-baseline --http-port 9000 --grpc-port 9001 --metrics-port 9002
      specbuild serve triton_repo/gpu --model-control explicit --load-model preprocessing --load-model postprocessing
    """
    from specbuild.serve.command import serve_until_interrupted

    if load_models and model_control != "explicit":
        raise UserError("--load-model needs --model-control explicit")
    if log_path is not None and log_dir is not None:
        raise UserError("--log names the log file and --log-dir its folder: give one of them")
    code = serve_until_interrupted(
        repository,
        tritonserver=tritonserver,
        host=host,
        http_port=_port(http_port),
        grpc_port=_port(grpc_port),
        metrics_port=_port(metrics_port),
        model_control=model_control,
        load_models=list(load_models),
        log_path=log_path,
        log_dir=log_dir,
        timeout_s=timeout_s,
        decode_cpus=decode_cpus,
        console=_console(stderr=True),
        out=_console(soft_wrap=True),
    )  # never wrap addresses, PID, commands
    if code:
        raise click.exceptions.Exit(code)


@cli.command()
@_recipe_arg()
@click.option("--url", required=True, metavar="HOST:PORT", help="HTTP endpoint of the speculative deployment.")
@click.option("--grpc-url", default=None, metavar="HOST:PORT", help="Its gRPC endpoint (gRPC checks need it).")
@click.option(
    "--baseline-url",
    default=None,
    metavar="HOST:PORT",
    help="HTTP endpoint of the baseline (the same target without speculation: triton_repo/<name>-baseline).",
)
@click.option("--baseline-grpc-url", default=None, metavar="HOST:PORT", help="The baseline's gRPC endpoint.")
@click.option(
    "--metrics-url",
    default=None,
    metavar="URL",
    help="Prometheus endpoint of the speculative deployment (http://HOST:PORT/metrics): the acceptance "
    "check reads the server's speculative counters there and compares them with the client's figures.",
)
@click.option(
    "--model",
    default=None,
    help="Model to generate with (default: the recipe's: the BLS for draft-target and prompt lookup, else ensemble).",
)
@click.option(
    "--report",
    "report_dir",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="Write report.json, junit.xml, report.md and PNG plots into this folder.",
)
@click.option(
    "--checks",
    default=None,
    metavar="NAMES",
    help="Comma-separated subset: health,functional,lossless,sampling,acceptance,spike_recovery,"
    "performance,cost_model,bad_input,load,auto_disable.",
)
@_json_option("the whole result (report.json's keys)")
@click.option(
    "--write-tuned-recipe",
    "tuned_path",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="Write the recipe again at this path with an adaptive.draft_len_schedule that turns speculation "
    "off where the measured sweep saw it stop paying (needs the performance check and the baseline).",
)
@click.option(
    "--against",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    metavar="OLD/report.json",
    help="Compare with an earlier run's report: acceptance per category and speedup per concurrency "
    "level, each a check that fails beyond validation.regression's tolerances.",
)
def validate(
    recipe: Path,
    url: str,
    grpc_url: str | None,
    baseline_url: str | None,
    baseline_grpc_url: str | None,
    metrics_url: str | None,
    model: str | None,
    report_dir: Path | None,
    checks: str | None,
    as_json: bool,
    tuned_path: Path | None,
    against: Path | None,
) -> None:
    """Run the validation suite against running servers; exit 0 only when every gate holds.

    \b
    Checks: health, functional (text, limits, stop words, streaming), lossless (greedy vs baseline, token for
    token), sampling (distribution vs baseline), acceptance, performance (concurrency sweep, speedup, crossover),
    bad input, load, auto-disable (with adaptive.disable_below: speculation switches itself off on poor
    acceptance, then no slower than the baseline; runs last). Exit code: 0 all gates hold, 1 a gate fails (summary
    printed), 2 user errors.
    Examples:
      specbuild validate recipes/demo.yaml --url 127.0.0.1:8000 --grpc-url 127.0.0.1:8001 \\
          --metrics-url http://127.0.0.1:8002/metrics \\
          --baseline-url 127.0.0.1:9000 --baseline-grpc-url 127.0.0.1:9001 --report reports/demo
      specbuild validate recipes/demo.yaml --url 127.0.0.1:8000 --checks health,functional,bad_input
    """
    from specbuild.validate import Endpoints, SuiteOptions, run_validation
    from specbuild.validate.report.json_report import clean
    from specbuild.validate.report.terminal import print_result, progress_bar

    build = _load(recipe, building=False)
    r = build.recipe
    target = Endpoints.parse(url, grpc_url, model, metrics=metrics_url)
    if baseline_grpc_url and not baseline_url:
        raise UserError("--baseline-grpc-url needs --baseline-url (the baseline's HTTP endpoint)")
    baseline = (
        Endpoints.parse(
            baseline_url, baseline_grpc_url, http_option="--baseline-url", grpc_option="--baseline-grpc-url"
        )
        if baseline_url
        else None
    )
    options = SuiteOptions(checks=[c.strip() for c in checks.split(",") if c.strip()] if checks else None)
    if tuned_path is not None and (
        baseline is None or (options.checks is not None and "performance" not in options.checks)
    ):
        raise UserError(
            "--write-tuned-recipe tunes from the performance sweep against the baseline: give "
            "--baseline-url and keep the performance check"
        )
    with progress_bar(_console(stderr=True)) as progress:
        result = run_validation(
            build, target, baseline, report_dir=report_dir, options=options, progress=progress, against=against
        )
    if report_dir is not None:
        from specbuild.cache.provenance import make_manifest, stamp

        stamp(report_dir, make_manifest(r, "report", report_dir, runtime=build.runtime), "report")
    out = _console(stderr=as_json)
    print_result(result, out)
    if result.report_files:
        out.print(f"report: {result.report_files[0].parent}", soft_wrap=True)
    if as_json:
        from specbuild.output.commands import validate_document

        click.echo(json.dumps(validate_document(result, clean(result.to_dict())), indent=2))
    if tuned_path is not None:
        _write_tuned_recipe(build, result, tuned_path, _console(stderr=True))
    if not result.passed:
        err = _console(stderr=True)  # a log's width: a long summary wraps (docs/machine-output.md)
        for c in result.failures:
            err.print(f"{c.status.upper()} {c.name}: {c.summary}", markup=False, highlight=False, soft_wrap=True)
        raise click.exceptions.Exit(1)


def _write_tuned_recipe(build, result, path: Path, console) -> None:
    """validate --write-tuned-recipe: the schedule from the sweep (specbuild.validate.tuning), written and re-read."""
    from specbuild.load import load_build
    from specbuild.validate.tuning import measured_speedups, tuned_schedule, write_tuned_recipe

    recipe = build.recipe
    tuning = tuned_schedule(build.spec, measured_speedups(result.check("performance")), recipe.build.max_batch_size)
    console.print(f"tuning: {tuning.why}", soft_wrap=True)
    if tuning.schedule is None:
        return
    written = write_tuned_recipe(recipe, path, tuning.schedule)
    load_build(written, check_files=False)  # the tuned recipe passes the same checks
    shown = ", ".join(f"{k}: {v}" for k, v in tuning.schedule.items())
    console.print(f"tuned recipe: {written} (adaptive.draft_len_schedule: {{{shown}}})", soft_wrap=True)


@cli.command()
@_json_option("the checks ({ready, checks: [...]})")
@click.option(
    "--recipe",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="Also check what this recipe needs: its exact trtllm-build commands, its GPU ids, MPI.",
)
@_examples_option
@click.option(
    "--flavour",
    type=click.Choice(["engine", "llm-api"]),
    default=None,
    help="Which serving flavour to check (default: the recipe's, else engine).",
)
def doctor(as_json: bool, recipe: Path | None, trtllm_examples: str | None, flavour: str | None) -> None:
    """Check this machine for the GPU path: GPUs, TensorRT-LLM, tritonserver, MPI, and per flavour the engine
    path's trtllm-build flags and tensorrtllm backend, or the llm-api flavour's release and NVIDIA's llmapi model.

    \b
    Each line is ok, warn or fail, with what to do. Exit 0 when nothing fails (warnings allowed), 2 otherwise.
    Examples:
      specbuild doctor
      specbuild doctor --flavour llm-api
      specbuild doctor --recipe recipes/tensorrt-llm/eagle.yaml --json
    """
    from specbuild.trtllm.doctor import as_dict, ready, render, run_doctor

    build = _load(recipe, trtllm_examples) if recipe is not None else None
    checks = run_doctor(build, flavour)
    if as_json:
        from specbuild.output.commands import doctor_document

        click.echo(json.dumps(doctor_document(as_dict(checks), checks), indent=2))
    else:
        render(checks, _console())
    if not ready(checks):
        raise click.exceptions.Exit(2)


def _interrupted(e: BaseException) -> int:
    """One line and the exit code of a signal: 143 for SIGTERM, 130 for Ctrl-C (servers are stopped by then)."""
    import signal

    from specbuild.processes.signals import EXIT_SIGINT, EXIT_SIGTERM, Terminated

    # The clean-up has run: a signal from now on must not turn this exit into a traceback or a death by signal
    # (Python restores SIG_DFL for the handlers it installed while it finalizes; an ignored signal stays ignored).
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    # Objects the signal cut off half-built (a client response whose __init__ never finished) may fail in their
    # __del__ while Python finalizes: that is not this run's outcome, and would print a traceback after it.
    sys.unraisablehook = _ignore_after_interrupt
    if isinstance(e, Terminated):
        click.echo("terminated (SIGTERM): servers stopped, partial output removed", err=True)
        return EXIT_SIGTERM
    click.echo("interrupted", err=True)
    return EXIT_SIGINT


def _ignore_after_interrupt(unraisable) -> None:
    """sys.unraisablehook once a run was interrupted (see _interrupted)."""


def main(argv: list[str] | None = None) -> int:
    """Console entry point: user errors print their message and exit 2; internal errors exit 1; SIGTERM is
    handled like Ctrl-C (clean-up runs) and exits 143, Ctrl-C 130. With --log-format json the last event is
    `finished` with the exit code."""
    from specbuild.output import events

    events.configure("text")  # until the group reads --log-format
    code = _main(argv)
    events.current().emit("finished", exit_code=code)
    return code


def _error_lines(e: UserError) -> str:
    """A user error as printed: every problem of a recipe on its own line, each in one form, `error: file:line:col:
    field: message — fix` (its warnings as `check` prints them: `file:line:col: field: warning: ...`); any other
    error as `error: ` and its message."""
    problems = getattr(e, "problems", None)
    if not problems:
        return f"error: {e}"
    return "\n".join(str(p) if p.message.startswith("warning: ") else f"error: {p}" for p in problems)


def _main(argv: list[str] | None) -> int:
    from specbuild.output.events import current
    from specbuild.processes.signals import sigterm_raises

    debug = "--debug" in (argv if argv is not None else sys.argv[1:])
    try:
        with sigterm_raises():
            rv = cli.main(args=argv, prog_name="specbuild", standalone_mode=False)
    except click.exceptions.Abort as e:  # click turns KeyboardInterrupt (and our Terminated) into Abort
        if isinstance(e.__cause__, KeyboardInterrupt):
            return _interrupted(e.__cause__)
        click.echo("aborted", err=True)
        return 130
    except click.ClickException as e:
        e.show()
        return e.exit_code
    except click.exceptions.Exit as e:
        return e.exit_code
    except UserError as e:
        if current().enabled:
            current().emit("error", message=str(e), exit_code=e.exit_code)
        else:
            click.echo(_error_lines(e), err=True)
        return e.exit_code
    except KeyboardInterrupt as e:
        return _interrupted(e)
    except Exception as e:  # an internal bug: say so plainly
        if debug:
            raise
        current().emit("error", message=f"internal error: {type(e).__name__}: {e}", exit_code=1)
        click.echo(
            f"internal error: {type(e).__name__}: {e}\n(this is a specbuild bug; rerun with --debug for the "
            "traceback and report it)",
            err=True,
        )
        return 1
    return rv if isinstance(rv, int) else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
