"""Paths and helpers shared by the TensorRT-LLM runtime tests (a uniquely named module: test folders share sys.path)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOUBLES = REPO / "tests" / "doubles"
PIPELINE = REPO / "pipeline"
EXAMPLES = DOUBLES / "trtllm_examples"


def leftovers(root: Path) -> list[str]:
    """Partial/old folders anywhere under root (none may stay after a failure)."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if ".partial-" in p.name or ".old-" in p.name)


def compile_repository(path, role="target"):
    from specbuild.plan import Layout
    from specbuild.recipe import load_recipe
    from specbuild.methods import describe
    from specbuild.runtimes import runtime_for

    recipe = load_recipe(path)
    layout = Layout(path.parent / "engines", path.parent / "triton_repo", path.parent / "reports", recipe.name)
    return recipe, runtime_for(recipe).write_repository(recipe, describe(recipe), layout, role)


def double_validates(model_yaml, release) -> subprocess.CompletedProcess:
    """Build the double's LLM(**args) from a model.yaml minus triton_config, in a child, through
    update_llm_args_with_extra_dict as NVIDIA's model does. `release`: 1.2 or a version (1.3.0rc3)."""
    code = (
        "import sys, yaml; from tensorrt_llm import LLM; "
        "from tensorrt_llm.llmapi.llm_utils import update_llm_args_with_extra_dict; "
        "cfg = yaml.safe_load(open(sys.argv[1])); cfg.pop('triton_config'); "
        "LLM(**update_llm_args_with_extra_dict({}, cfg))"
    )
    version = release if release.count(".") > 1 else f"{release}.0"
    env = dict(
        os.environ,
        PYTHONPATH=f"{PIPELINE}{os.pathsep}{DOUBLES}",
        SPECBUILD_TRTLLM_DOUBLE="1",
        SPECBUILD_DOUBLE_TRTLLM_VERSION=version,
    )
    return subprocess.run([sys.executable, "-c", code, str(model_yaml)], capture_output=True, text=True, env=env)
