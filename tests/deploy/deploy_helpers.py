"""Helpers of the deployment-bundle tests: the tensorrt-llm example recipes (engine and llm-api flavours) and their
variants, engine folders that carry only config.json (as trtllm-build writes it), llm-api repositories with the
test double's stand-in for NVIDIA's model.py (the repository is what specbuild writes; NVIDIA's files are copied
from the installed TensorRT-LLM at compile), and bundles written into a temp layout."""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path

from specbuild.facts.engine_facts import expected_limits
from specbuild.methods import describe
from specbuild.plan import Layout
from specbuild.recipe.schema import Recipe
from specbuild.recipe.yaml_source import load_located
from specbuild.runtimes import runtime_for

ROOT = Path(__file__).resolve().parents[2]
NVIDIA_LLMAPI_MODEL = ROOT / "tests" / "doubles" / "triton_backend" / "all_models" / "llmapi" / "tensorrt_llm" / "1"


def _bundled(path: Path) -> bool:
    """The example recipes that get a bundle (every tensorrt-llm one)."""
    from specbuild.deploy.bundle import applies
    from specbuild.recipe.loader import load_recipe
    from specbuild.runtimes.build import resolve_build

    recipe = load_recipe(path, check_files=False)
    return applies(recipe, resolve_build(recipe).runtime) is None


GPU_RECIPES = [p for p in sorted((ROOT / "recipes" / "tensorrt-llm").glob("*.yaml")) if _bundled(p)]
LLMAPI_RECIPES = [p for p in GPU_RECIPES if p.stem.startswith("llmapi_")]
# the team's shared reference folder sits beside the checkout (CI lays it there); SPECBUILD_SHARED_DIR overrides
SHARED_CRDS = Path(os.environ.get("SPECBUILD_SHARED_DIR", ROOT.parent / "shared")) / "reference" / "crds"

# name -> (example recipe stem, changes {"section.key": value}): for each flavour the layouts the issues ask for
# (engine: tp 8 x pp 2 over 2 nodes, draft-target tp 2; llm-api: 2 nodes, multi-instance) plus more
VARIANTS = {
    # 2 nodes of 8 GPUs: tp 8 x pp 2, gpu_device_ids lists one node's GPUs
    "tp8-pp2-2nodes": (
        "none",
        {"name": "trt-tp8-pp2", "build.tp_size": 8, "build.pp_size": 2, "triton.gpu_device_ids": list(range(8))},
    ),
    # draft-target with a tp=2 target on GPUs 1,2 and the draft on GPU 0
    "draft-target-tp2": (
        "draft_target",
        {"name": "trt-dt-tp2", "build.tp_size": 2, "triton.gpu_device_ids": [1, 2], "triton.draft_gpu_device_ids": [0]},
    ),
    # fast logits: pre-spawned orchestrator ranks (world 1 + 1 + 2)
    "draft-target-fast-logits": (
        "draft_target",
        {
            "name": "trt-dt-fast",
            "build.tp_size": 2,
            "speculation.use_draft_logits": True,
            "speculation.fast_logits": True,
            "triton.gpu_device_ids": [1, 2],
            "triton.draft_gpu_device_ids": [0],
        },
    ),
    # a single-node tp=4 StatefulSet on enroot, in its own namespace, without autoscaling
    "eagle-tp4-statefulset": (
        "eagle",
        {
            "name": "trt-eagle-tp4",
            "build.tp_size": 4,
            "triton.gpu_device_ids": [0, 1, 2, 3],
            "deploy.kubernetes": {"workload": "StatefulSet", "namespace": "llm"},
            "deploy.autoscaling": {"min_replicas": 2, "max_replicas": 2},
            "deploy.slurm": {"container_runtime": "enroot"},
        },
    ),
    # llm-api across nodes: tp 8 x pp 2 = 16 ranks on 2 nodes of 8 GPUs (no speculation: the PyTorch backend does
    # not combine it with pipeline parallelism), every rank under trtllm-llmapi-launch
    "llmapi-tp8-pp2-2nodes": (
        "llmapi_prompt_lookup",
        {
            "name": "trt-llmapi-tp8-pp2",
            "speculation": {"method": "none"},
            "build.tp_size": 8,
            "build.pp_size": 2,
            "llm_api.nodes": 2,
            "triton.gpu_device_ids": list(range(16)),
        },
    ),
    # llm-api EAGLE-3 with tp 16 over 2 nodes of 8 GPUs (tensorrtllm_backend docs/llmapi.md@0b9d7d5: srun -N 2
    # --ntasks-per-node=8), on enroot
    "llmapi-eagle3-tp16-2nodes": (
        "llmapi_eagle3",
        {
            "name": "trt-llmapi-e3-tp16",
            "build.tp_size": 16,
            "llm_api.nodes": 2,
            "triton.gpu_device_ids": list(range(16)),
            "deploy.slurm": {"container_runtime": "enroot"},
        },
    ),
    # llm-api multi-instance: 2 instances of tp 2 on GPUs 0,1 and 2,3 in one pod, no MPI (tensorrtllm_backend
    # docs/llmapi.md@0b9d7d5)
    "llmapi-2x-tp2-instances": (
        "llmapi_tp2",
        {"name": "trt-llmapi-2x-tp2", "llm_api.instances": 2, "triton.gpu_device_ids": [0, 1, 2, 3]},
    ),
}


def recipe_data(stem: str) -> dict:
    return copy.deepcopy(dict(load_located(ROOT / "recipes" / "tensorrt-llm" / f"{stem}.yaml").data))


def make_recipe(stem: str, changes: dict | None = None) -> Recipe:
    """An example recipe with `changes` applied ("section.key" or "section.sub" -> value), validated by the
    schema only: recipe/checks.py still asks for tp*pp GPU ids (the multi-node rule is deploy_findings')."""
    data = recipe_data(stem)
    for key, value in (changes or {}).items():
        node = data
        *parents, last = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    recipe = Recipe.model_validate(data)
    recipe._source = ROOT / "recipes" / "tensorrt-llm" / f"{stem}.yaml"
    return recipe


def all_recipes() -> dict[str, Recipe]:
    out = {p.stem: make_recipe(p.stem) for p in GPU_RECIPES}
    out.update({name: make_recipe(stem, changes) for name, (stem, changes) in VARIANTS.items()})
    return out


def layout_in(root: Path, recipe: Recipe) -> Layout:
    return Layout(root / "engines", root / "triton_repo", root / "reports", recipe.name)


def write_engine_configs(recipe: Recipe, layout: Layout) -> None:
    """config.json of each engine the target repository serves, as a build of this recipe writes it."""
    from specbuild.repository.engine.writer import engine_roles

    b = recipe.build
    for _model, role in engine_roles(recipe, describe(recipe), "target").items():
        folder = layout.engine(role)
        folder.mkdir(parents=True, exist_ok=True)
        tp = recipe.speculation.tp_size if role == "draft" else b.tp_size
        pp = 1 if role == "draft" else b.pp_size
        mapping = {"world_size": tp * pp, "tp_size": tp, "pp_size": pp, "gpus_per_node": recipe.deploy.gpus_per_node}
        config = {
            "version": "test",
            "pretrained_config": {"mapping": mapping},
            "build_config": expected_limits(recipe, describe(recipe), role).as_build_config(),
        }
        (folder / "config.json").write_text(json.dumps(config))


def _engine_repository(recipe: Recipe, layout: Layout) -> None:
    from specbuild.repository.engine.writer import write_repository

    write_engine_configs(recipe, layout)
    write_repository(recipe, describe(recipe), layout, flavour=runtime_for(recipe))


def _llmapi_repository(recipe: Recipe, layout: Layout) -> None:
    """What TrtllmLlmApiRuntime.write_repository writes, without the installed TensorRT-LLM it asks for: NVIDIA's
    model.py/helpers.py are the test double's."""
    from specbuild.repository.llmapi.writer import write_repository

    files = {name: NVIDIA_LLMAPI_MODEL / name for name in ("model.py", "helpers.py")}
    write_repository(recipe, describe(recipe), layout, "target", files)


REPOSITORY_WRITERS = {"engine": _engine_repository, "llm-api": _llmapi_repository}


def compile_layout(root: Path, recipe: Recipe) -> Layout:
    """A layout holding the GPU repository of the recipe (engines: config.json only), as compile leaves it."""
    layout = layout_in(root, recipe)
    REPOSITORY_WRITERS[recipe.flavour](recipe, layout)
    return layout
