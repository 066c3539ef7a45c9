"""Write a Triton model repository for a recipe: checked against the engines first, written atomically.

    from specbuild.triton.repository import write_repository
    write_repository(recipe, layout)                 # -> triton_repo/<name>   (role "target")
    write_repository(recipe, layout, role="baseline")  # -> triton_repo/<name>-baseline

Layout of a repository (both runtimes; only the core models' backend and model.py differ):

    <repo>/preprocessing/config.pbtxt, 1/model.py
    <repo>/tensorrt_llm/config.pbtxt, 1/ (GPU: empty; reference: model.py)
    <repo>/tensorrt_llm_draft/...          draft-target only
    <repo>/postprocessing/config.pbtxt, 1/model.py
    <repo>/ensemble/config.pbtxt, 1/
    <repo>/tensorrt_llm_bls/config.pbtxt, 1/model.py, 1/bls_drafting.py
    <repo>/launch_triton.sh                GPU (runtime tensorrt-llm) only
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from specbuild.errors import UserError
from specbuild.triton import configs, params
from specbuild.triton.engine_check import check_engines
from specbuild.triton.launch import SCRIPT_NAME, launch_script

if TYPE_CHECKING:
    from specbuild.plan import Layout
    from specbuild.recipe.schema import Recipe

SOURCES = Path(__file__).resolve().parent / "models"

# Our model sources, by model name: (source folder under triton/models, files copied into <model>/1/).
MODEL_SOURCES: dict[str, tuple[str, tuple[str, ...]]] = {
    "preprocessing": ("preprocessing", ("model.py",)),
    "postprocessing": ("postprocessing", ("model.py",)),
    "tensorrt_llm_bls": ("tensorrt_llm_bls", ("model.py", "bls_drafting.py")),
}
REFERENCE_CORE = ("tensorrt_llm_reference", ("model.py",))


def engine_roles(recipe: Recipe, role: str) -> dict[str, str]:
    """Core model name -> the role of the engine it serves."""
    return {name: ("draft" if name == "tensorrt_llm_draft" else role) for name in params.core_models(recipe, role)}


def model_files(recipe: Recipe, model: str) -> dict[str, Path]:
    """The files written into `<model>/1/`: name -> source path."""
    if model in MODEL_SOURCES:
        folder, names = MODEL_SOURCES[model]
    elif model in configs.CORE_MODELS and recipe.runtime == "reference":
        folder, names = REFERENCE_CORE
    else:
        return {}
    return {name: SOURCES / folder / name for name in names}


def build_repository(recipe: Recipe, layout: Layout, role: str = "target") -> dict[str, str]:
    """Every file of the repository as relative path -> text, after checking the engines. Writes nothing."""
    engines = {name: (engine_role, layout.engine(engine_role))
               for name, engine_role in engine_roles(recipe, role).items()}
    check_engines(recipe, engines)
    built = configs.repository_configs(recipe, role, {name: folder for name, (_, folder) in engines.items()})
    files: dict[str, str] = {}
    problems: list[str] = []
    for name, cfg in built.items():
        text = configs.to_pbtxt(cfg)
        problems += configs.config_problems(cfg, text)
        files[f"{name}/config.pbtxt"] = text
        sources = model_files(recipe, name)
        for file_name, source in sources.items():
            files[f"{name}/1/{file_name}"] = source.read_text()
        if not sources:
            files[f"{name}/1/.gitkeep"] = ""
    if problems:  # an internal error: the builders and the checks disagree
        raise AssertionError("built configs fail their own checks:\n  " + "\n  ".join(problems))
    if recipe.runtime == "tensorrt-llm":
        files[SCRIPT_NAME] = launch_script(recipe, role)
    return files


def write_repository(recipe: Recipe, layout: Layout, role: str = "target",
                     progress: Callable[[str], None] | None = None) -> Path:
    """Write triton_repo/<name> (or <name>-<role>) and return its path. The engines are read and checked first;
    the repository is written to a sibling temp folder and renamed into place, so it appears complete or not at
    all (an existing one is replaced only once the new one is complete)."""
    say = progress or (lambda _m: None)
    target = layout.repository(role)
    say(f"checking the engines against recipe {recipe.name}")
    files = build_repository(recipe, layout, role)
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.parent / f".{target.name}.partial-{os.getpid()}"
    old = target.parent / f".{target.name}.old-{os.getpid()}"
    shutil.rmtree(partial, ignore_errors=True)
    try:
        for rel, text in files.items():
            path = partial / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            if rel == SCRIPT_NAME:
                path.chmod(0o755)
        say(f"writing {target}")
        if target.exists():
            os.replace(target, old)
        os.replace(partial, target)
        shutil.rmtree(old, ignore_errors=True)
    except OSError as e:
        shutil.rmtree(partial, ignore_errors=True)
        if old.exists() and not target.exists():
            os.replace(old, target)
        raise UserError(f"could not write the repository {target}: {e}") from e
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        if old.exists() and not target.exists():
            os.replace(old, target)
        raise
    return target
