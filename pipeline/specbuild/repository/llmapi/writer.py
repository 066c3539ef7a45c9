"""Write an llm-api repository (TensorRT-LLM triton_backend/all_models/llmapi/): one model, written atomically.

    <repo>/tensorrt_llm/config.pbtxt      protobuf ModelConfig (llmapi/configs.py)
    <repo>/tensorrt_llm/1/model.yaml      from the recipe, every value explicit (llmapi/model_yaml.py)
    <repo>/tensorrt_llm/1/model.py ...    the runtime's model: NVIDIA's model.py + helpers.py on GPU (copied at
                                          compile time where the machine has them, else by launch_triton.sh at
                                          start from the container), specbuild's on the CPU
    <repo>/launch_triton.sh               llmapi/launch.py

The baseline repository is the same without `speculative_config`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Callable

from specbuild.files import atomic
from specbuild.repository.llmapi import configs, launch, model_yaml

if TYPE_CHECKING:
    from specbuild.plan import Layout
    from specbuild.recipe.schema import Recipe
    from specbuild.speculation import Speculation


def build_repository(recipe: Recipe, spec: Speculation, role: str, model_files: dict[str, Path]) -> dict[str, str]:
    """Every file of the repository as relative path -> text. Writes nothing."""
    cfg = configs.model_config(recipe)
    text = configs.to_pbtxt(cfg)
    problems = configs.config_problems(cfg, text, must_have={})  # the llmapi model reads no parameters
    # (config.pbtxt@c8c6df0)
    if problems:  # an internal error: the builder and the checks disagree
        raise AssertionError("the built config fails its own checks:\n  " + "\n  ".join(problems))
    files = {
        f"{configs.MODEL}/config.pbtxt": text,
        f"{configs.MODEL}/1/{model_yaml.FILE}": model_yaml.dump(model_yaml.model_yaml(recipe, spec, role=role)),
    }
    for name, source in model_files.items():
        files[f"{configs.MODEL}/1/{name}"] = source.read_text()
    files[launch.SCRIPT_NAME] = launch.launch_script(recipe)
    return files


def write_repository(
    recipe: Recipe,
    spec: Speculation,
    layout: Layout,
    role: str,
    model_files: dict[str, Path],
    progress: Callable[[str], None] | None = None,
    notice: atomic.Notice | None = None,
    validate: Callable[[str], None] | None = None,
) -> Path:
    """Write the repository; `validate` gets model.yaml's text first and raises to stop before anything is
    written (the tensorrt-llm runtime parses it with the installed release)."""
    target = layout.repository(role)
    files = build_repository(recipe, spec, role, model_files)
    if validate is not None:
        if progress:
            progress(f"parsing {model_yaml.FILE} with the installed TensorRT-LLM")
        validate(files[f"{configs.MODEL}/1/{model_yaml.FILE}"])
    if progress:
        progress(f"writing {target}")
    return atomic.write_tree(target, files, executable=(launch.SCRIPT_NAME,), notice=notice)
