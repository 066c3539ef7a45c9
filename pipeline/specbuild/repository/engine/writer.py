"""Write a Triton model repository for a recipe: checked against the engines first, written atomically.

    from specbuild.repository.engine.writer import write_repository
    write_repository(recipe, spec, layout, flavour=runtime)                   # -> triton_repo/<name> ("target")
    write_repository(recipe, spec, layout, role="baseline", flavour=runtime)  # -> triton_repo/<name>-baseline
    (spec, runtime: what the command resolved the recipe to, specbuild.runtimes.build; EngineFlavour.
    write_repository passes itself)

Layout of a repository (both runtimes; only the core models' backend and model.py differ):

    <repo>/preprocessing/config.pbtxt, 1/model.py
    <repo>/tensorrt_llm/config.pbtxt, 1/ (GPU: empty; reference: model.py)
    <repo>/tensorrt_llm_draft/...          draft-target only
    <repo>/postprocessing/config.pbtxt, 1/model.py
    <repo>/ensemble/config.pbtxt, 1/
    <repo>/tensorrt_llm_bls/config.pbtxt, 1/model.py, 1/bls_drafting.py, 1/prompt_lookup_drafts.py,
                                        1/draft_len_schedule.py
    <repo>/launch_triton.sh                where the runtime starts the server through a script (GPU)

Every Python model also gets the modules our model.py files share (copied, so that each model folder is
self-contained in NVIDIA's containers where specbuild is not installed): `1/model_parameters.py` (the one
parameter parser), `1/request_checks.py` (sampling values checked where they enter) and `1/serving_metrics.py`
(the Prometheus families the models export).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Callable

from specbuild import standalone
from specbuild.files import atomic
from specbuild.repository.engine import configs, params
from specbuild.repository.engine.engine_check import check_engines

if TYPE_CHECKING:
    from specbuild.plan import Layout
    from specbuild.repository.engine.core import EngineCore
    from specbuild.recipe.schema import Recipe
    from specbuild.speculation import Speculation

SOURCES = Path(__file__).resolve().parent / "models"
STANDALONE = standalone.FOLDER
SHARED_MODULES = {
    name: STANDALONE / name for name in ("model_parameters.py", "request_checks.py", "serving_metrics.py")
}

# Our model sources, by model name: files copied into <model>/1/ (name -> source path).
MODEL_SOURCES: dict[str, dict[str, Path]] = {
    "preprocessing": {"model.py": SOURCES / "preprocessing" / "model.py"},
    "postprocessing": {"model.py": SOURCES / "postprocessing" / "model.py"},
    "tensorrt_llm_bls": {
        "model.py": SOURCES / "tensorrt_llm_bls" / "model.py",
        "bls_drafting.py": SOURCES / "tensorrt_llm_bls" / "bls_drafting.py",
        "prompt_lookup_drafts.py": STANDALONE / "prompt_lookup_drafts.py",
        "draft_len_schedule.py": STANDALONE / "draft_len_schedule.py",
    },
}


def engine_roles(recipe: Recipe, spec: Speculation, role: str) -> dict[str, str]:
    """Core model name -> the role of the engine it serves."""
    return {
        name: ("draft" if name == "tensorrt_llm_draft" else role) for name in params.core_models(recipe, spec, role)
    }


def model_files(flavour: EngineCore, model: str) -> dict[str, Path]:
    """The files written into `<model>/1/`: name -> source path (python models also get the parameter parser)."""
    if model in MODEL_SOURCES:
        files = dict(MODEL_SOURCES[model])
    elif model in configs.CORE_MODELS:
        files = flavour.core_model_files()
    else:
        return {}
    if "model.py" in files:
        files.update(SHARED_MODULES)
    return files


def build_repository(
    recipe: Recipe,
    spec: Speculation,
    layout: Layout,
    role: str = "target",
    engines_built: bool = True,
    *,
    flavour: EngineCore,
) -> dict[str, str]:
    """Every file of the repository as relative path -> text, after checking the engines (unless they are not
    built: `compile --render-only`). Writes nothing. `flavour`: the recipe's runtime (EngineFlavour.
    write_repository passes itself)."""
    engines = {
        name: (engine_role, layout.engine(engine_role))
        for name, engine_role in engine_roles(recipe, spec, role).items()
    }
    if engines_built:
        check_engines(recipe, spec, flavour, engines)
    built = configs.repository_configs(
        recipe, spec, role, {name: folder for name, (_, folder) in engines.items()}, flavour
    )
    files: dict[str, str] = {}
    problems: list[str] = []
    for name, cfg in built.items():
        text = configs.to_pbtxt(cfg)
        problems += configs.config_problems(cfg, text)
        files[f"{name}/config.pbtxt"] = text
        sources = model_files(flavour, name)
        for file_name, source in sources.items():
            files[f"{name}/1/{file_name}"] = source.read_text()
        if not sources:
            files[f"{name}/1/.gitkeep"] = ""
    if problems:  # an internal error: the builders and the checks disagree
        raise AssertionError("built configs fail their own checks:\n  " + "\n  ".join(problems))
    files.update(flavour.repository_files(recipe, spec, role))
    return files


def write_repository(
    recipe: Recipe,
    spec: Speculation,
    layout: Layout,
    role: str = "target",
    progress: Callable[[str], None] | None = None,
    notice: atomic.Notice | None = None,
    engines_built: bool = True,
    *,
    flavour: EngineCore,
) -> Path:
    """Write triton_repo/<name> (or <name>-<role>) and return its path. The engines are read and checked first;
    the repository appears complete or not at all (an existing one is replaced only once the new one is
    complete)."""
    say = progress or (lambda _m: None)
    target = layout.repository(role)
    if engines_built:
        say(f"checking the engines against recipe {recipe.name}")
    files = build_repository(recipe, spec, layout, role, engines_built, flavour=flavour)
    say(f"writing {target}")
    scripts = tuple(rel for rel in files if rel.endswith(".sh"))
    return atomic.write_tree(target, files, executable=scripts, notice=notice)
