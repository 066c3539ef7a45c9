"""`python -m specbuild.zoo build --profile tiny --out checkpoints/tiny`, `add-stage eagle3|pard --zoo <folder>` and
`verify <folder>`."""

from __future__ import annotations

import os
import sys

import click

from specbuild.errors import UserError
from specbuild.zoo import manifest
from specbuild.zoo.precision import CHOICES as PRECISIONS
from specbuild.zoo.profiles import get_profile


@click.group()
def cli() -> None:
    """Build or verify the tiny model zoo (real-format checkpoints trained on this CPU)."""


@cli.command("build")
@click.option("--profile", "profile_name", required=True, help="tiny | base | small | micro")
@click.option("--out", "out", required=True, type=click.Path(file_okay=False), help="output folder (replaced)")
@click.option("--threads", type=int, default=None, help="torch threads (default: min(2, cpus))")
@click.option(
    "--resume-from",
    type=click.Path(exists=True, file_okay=False),
    default=None,
    help="an earlier build folder: reuse its stages whose settings and code versions match",
)
@click.option(
    "--precision",
    type=click.Choice(PRECISIONS),
    default="auto",
    show_default=True,
    help="training precision; auto = bf16 autocast only where the CPU has native bf16 "
    "(emulated bf16 makes a step ~20x slower), else float32",
)
def build_cmd(profile_name: str, out: str, threads: int | None, resume_from: str | None, precision: str) -> None:
    """Train every model of PROFILE from scratch and write it to OUT."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from specbuild.zoo.build import build, main_progress

    folder = build(get_profile(profile_name), out, main_progress, threads, resume_from, precision)
    click.echo(str(folder))


@cli.command("add-stage")
@click.argument("stage", type=click.Choice(["eagle3", "pard", "mtp-target"]))
@click.option(
    "--zoo",
    "folder",
    required=True,
    type=click.Path(exists=True, file_okay=False),
    help="an existing zoo folder (its tokenizer and target are reused, other stages are left as they are)",
)
@click.option("--threads", type=int, default=None, help="torch threads (default: min(2, cpus))")
@click.option(
    "--precision",
    type=click.Choice(PRECISIONS),
    default="auto",
    show_default=True,
    help="training precision of this stage (recorded per stage in the manifest)",
)
def add_stage_cmd(stage: str, folder: str, threads: int | None, precision: str) -> None:
    """Train STAGE into an existing zoo folder and update its manifest and README."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from specbuild.zoo.build import add_stage, main_progress

    click.echo(str(add_stage(folder, stage, main_progress, threads, precision)))


@cli.command("verify")
@click.argument("folder", type=click.Path(exists=True, file_okay=False))
def verify_cmd(folder: str) -> None:
    """Check every file of FOLDER against its manifest.json."""
    from pathlib import Path

    recorded = manifest.read(Path(folder))
    if recorded is None:
        raise UserError(f"{folder}/manifest.json: missing or unreadable; rebuild the folder.")
    problems = manifest.mismatches(Path(folder), recorded)
    if problems:
        raise UserError(f"{folder}: does not match its manifest: " + "; ".join(problems))
    click.echo(f"{folder}: {len(recorded['files'])} files match manifest.json")


def _exit_on_sigterm() -> None:
    """Turn SIGTERM into SystemExit so an interrupted build removes its .partial folder."""
    import signal

    signal.signal(signal.SIGTERM, lambda _signum, _frame: sys.exit(143))


def main() -> None:
    _exit_on_sigterm()
    try:
        cli(standalone_mode=False)
    except UserError as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(e.exit_code)
    except click.exceptions.Abort:
        sys.exit(1)
    except click.ClickException as e:
        e.show()
        sys.exit(e.exit_code)


if __name__ == "__main__":
    main()
