"""The specbuild command line. Every user error ends with a message that says what to do, and exit code 2."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from specbuild import __version__
from specbuild.errors import UserError

EXAMPLES_DIR_HELP = ("TensorRT-LLM examples/ tree (e.g. /app/examples in the NGC container) whose "
                     "convert_checkpoint.py scripts convert Medusa/EAGLE where the wheel API is unreliable")


def _recipe_arg():
    return click.argument("recipe", type=click.Path(path_type=Path, dir_okay=False))


def _layout_options(f):
    f = click.option("--engines-dir", type=click.Path(path_type=Path, file_okay=False), default=Path("engines"),
                     show_default=True, help="Root of engine folders (engines/<name>/...).")(f)
    f = click.option("--repo-dir", type=click.Path(path_type=Path, file_okay=False), default=Path("triton_repo"),
                     show_default=True, help="Root of Triton model repositories (triton_repo/<name>).")(f)
    f = click.option("--report-dir", type=click.Path(path_type=Path, file_okay=False), default=Path("reports"),
                     show_default=True, help="Root of validation reports (reports/<name>).")(f)
    return f


def _layout(recipe, engines_dir: Path, repo_dir: Path, report_dir: Path):
    from specbuild.plan import Layout

    return Layout(engines_dir.absolute(), repo_dir.absolute(), report_dir.absolute(), recipe.name)


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(__version__, "--version", prog_name="specbuild")
@click.option("--debug", is_flag=True, help="Show full tracebacks for internal errors.")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """Build speculative-decoding LLM deployments for NVIDIA Triton from one YAML recipe.

    \b
    A recipe names a target model, a speculative method (medusa, eagle, draft_target, prompt_lookup,
    lookahead or none) and a runtime: tensorrt-llm (GPU engines) or reference (CPU, PyTorch).
    \b
    Examples:
      specbuild check recipes/reference/eagle.yaml      # validate a recipe
      specbuild plan recipes/tensorrt-llm/medusa.yaml   # show every step and command, run nothing
      specbuild compile recipes/demo.yaml               # engines -> repository -> serve -> validate
    """
    ctx.ensure_object(dict)["debug"] = debug


@cli.command()
@_recipe_arg()
def check(recipe: Path) -> None:
    """Check a recipe: schema, every rule from the fact sheets, and the files it names.

    \b
    Prints each problem as file:line:col: field: message, and exits 2 if there is any.
    Example:
      specbuild check recipes/reference/medusa.yaml
    """
    from specbuild.methods import method_for
    from specbuild.recipe import load_recipe

    r = load_recipe(recipe)
    method = method_for(r)
    click.echo(f"{recipe}: ok — {r.name}: {method.name} ({method.summary}) on the {r.runtime} runtime")


@cli.command()
@_recipe_arg()
@_layout_options
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON.")
@click.option("--trtllm-examples", type=click.Path(file_okay=False), default=None, help=EXAMPLES_DIR_HELP)
def plan(recipe: Path, engines_dir: Path, repo_dir: Path, report_dir: Path, as_json: bool,
         trtllm_examples: str | None) -> None:
    """Print the ordered steps a compile would take, with every command line in full. Runs nothing.

    \b
    Example:
      specbuild plan recipes/tensorrt-llm/eagle.yaml --json > plan.json
    """
    from specbuild.plan import make_plan
    from specbuild.recipe import load_recipe

    r = load_recipe(recipe)
    p = make_plan(r, _layout(r, engines_dir, repo_dir, report_dir), trtllm_examples=trtllm_examples)
    if as_json:
        click.echo(json.dumps(p.to_dict(), indent=2))
    else:
        click.echo(p.render(), nl=False)


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


def _not_yet(name: str, issue: str):
    raise UserError(f"specbuild {name} is not implemented yet ({issue}); use `specbuild plan` to see what it will do")


@cli.command()
@_recipe_arg()
@_layout_options
@click.option("--no-validate", is_flag=True, help="Stop after writing the repository (do not serve or validate).")
@click.option("--trtllm-examples", type=click.Path(file_okay=False), default=None, help=EXAMPLES_DIR_HELP)
@click.option("--tritonserver", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="tritonserver binary to serve with (default: a system one, else nvidia-pytriton's).")
def compile(recipe: Path, engines_dir: Path, repo_dir: Path, report_dir: Path, no_validate: bool,  # noqa: A001
            trtllm_examples: str | None, tritonserver: Path | None) -> None:
    """Build engines, write the Triton repository, serve it on free loopback ports, validate it, report.

    \b
    Exit code: 0 when every gate of the recipe's validation section holds, 1 when a gate fails, 2 for user errors.
    Outputs: engines/<name>/, triton_repo/<name>/ (+ <name>-baseline/), reports/<name>/.
    Examples:
      specbuild compile recipes/demo.yaml
      specbuild compile recipes/tensorrt-llm/eagle.yaml --no-validate --trtllm-examples /app/examples
    """
    from rich.console import Console

    from specbuild.compile import CompileOptions, compile_recipe
    from specbuild.recipe import load_recipe

    r = load_recipe(recipe)
    options = CompileOptions(validate=not no_validate, trtllm_examples=trtllm_examples, tritonserver=tritonserver)
    code = compile_recipe(r, _layout(r, engines_dir, repo_dir, report_dir), options, Console(stderr=True))
    if code:
        raise click.exceptions.Exit(code)


@cli.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
def serve() -> None:
    """Start tritonserver on a model repository (not implemented yet).

    \b
    Example:
      specbuild serve triton_repo/demo
    """
    _not_yet("serve", "see issue 6")


@cli.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
def validate() -> None:
    """Run the validation suite against a running server (not implemented yet).

    \b
    Example:
      specbuild validate recipes/demo.yaml --url 127.0.0.1:8000
    """
    _not_yet("validate", "see issue 6")


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print the checks as JSON ({ready, checks: [...]}).")
@click.option("--recipe", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="Also check what this recipe needs: its exact trtllm-build commands, its GPU ids, MPI.")
def doctor(as_json: bool, recipe: Path | None) -> None:
    """Check this machine for the GPU path: GPUs, TensorRT-LLM, trtllm-build flags, tritonserver, MPI.

    \b
    Each line is ok, warn or fail, with what to do. Exit 0 when nothing fails (warnings allowed), 2 otherwise.
    Examples:
      specbuild doctor
      specbuild doctor --recipe recipes/tensorrt-llm/eagle.yaml --json
    """
    from rich.console import Console

    from specbuild.trtllm.doctor import as_dict, ready, render, run_doctor

    r = None
    if recipe is not None:
        from specbuild.recipe import load_recipe

        r = load_recipe(recipe)
    checks = run_doctor(r)
    if as_json:
        click.echo(json.dumps(as_dict(checks), indent=2))
    else:
        render(checks, Console())
    if not ready(checks):
        raise click.exceptions.Exit(2)


def main(argv: list[str] | None = None) -> int:
    """Console entry point: user errors print their message and exit 2; internal errors exit 1."""
    debug = "--debug" in (argv if argv is not None else sys.argv[1:])
    try:
        rv = cli.main(args=argv, prog_name="specbuild", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        return 130
    except click.ClickException as e:
        e.show()
        return e.exit_code
    except click.exceptions.Exit as e:
        return e.exit_code
    except UserError as e:
        click.echo(f"error: {e}" if "\n" not in str(e) else str(e), err=True)
        return e.exit_code
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        return 130
    except Exception as e:  # an internal bug: say so plainly
        if debug:
            raise
        click.echo(f"internal error: {type(e).__name__}: {e}\n(this is a specbuild bug; rerun with --debug for the "
                   "traceback and report it)", err=True)
        return 1
    return rv if isinstance(rv, int) else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
