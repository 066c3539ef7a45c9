"""Load a recipe for a command: read it, resolve it once (specbuild.runtimes.build), and judge it by every rule
that refuses it: its own, its method's and its runtime's (specbuild.recipe), its deployment bundle's
(specbuild.deploy.checks), and with `check_files` those of the files it names.

    build = load_build(path, options=BuildOptions(...))   # raises RecipeError listing every problem, located

The finding sources are composed here, above the recipe and the deploy packages, so that neither reaches the other.
"""

from __future__ import annotations

from pathlib import Path

from specbuild.deploy.checks import deploy_findings
from specbuild.findings import Finding
from specbuild.recipe.checks import general_findings
from specbuild.recipe.files import file_findings
from specbuild.recipe.loader import UnknownMethod, judge, read_recipe, stand_in_findings
from specbuild.runtimes.base import BuildOptions
from specbuild.runtimes.build import Build, resolve_build


def findings(build: Build, check_files: bool = True) -> list[Finding]:
    """Every rule's findings, in the order `check` has always shown them (ties on a line keep it)."""
    out = [*general_findings(build), *deploy_findings(build)]
    if check_files:
        out += file_findings(build)
    return out


def load_build(path: str | Path, *, check_files: bool = True, options: BuildOptions | None = None) -> Build:
    """The recipe at `path`, checked and resolved once. `options`: the command-line options that change what it
    builds (`check`, `plan` and `compile` take the same)."""
    try:
        recipe, src = read_recipe(path)
    except UnknownMethod as e:  # the rest of the file judged with the closest method in its place
        raise stand_in_findings(e, lambda build: findings(build, check_files), options) from None
    build = resolve_build(recipe, options)
    judge(build.recipe, findings(build, check_files), src, path)
    return build


__all__ = ["findings", "load_build"]
