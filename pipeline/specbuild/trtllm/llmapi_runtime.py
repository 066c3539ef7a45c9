"""The tensorrt-llm runtime in the llm-api flavour: TensorRT-LLM's PyTorch backend behind NVIDIA's llmapi Triton
model (llmapi fact sheet). Nothing is built ahead of time: the repository holds model.yaml (from the recipe),
config.pbtxt and NVIDIA's model.py + helpers.py, copied from the installed TensorRT-LLM at compile time (never
shipped by specbuild)."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Iterator

from specbuild.errors import UserError
from specbuild.llmapi.flavour import LlmApiFlavour
from specbuild.llmapi.launch import SCRIPT_NAME, launch_mode, server_command
from specbuild.llmapi.model_yaml import RELEASES_WITH_DYNAMIC_TREE
from specbuild.methods.base import Finding
from specbuild.paths import show
from specbuild.plan import ServeStep
from specbuild.speculation import DynamicTree

NVIDIA_FILES = ("model.py", "helpers.py")
CONTAINER_MODEL_DIR = Path("/app/all_models/llmapi/tensorrt_llm/1")  # Triton TRT-LLM containers (§0; BK Dockerfile)
IN_SOURCE = Path("triton_backend/all_models/llmapi/tensorrt_llm/1")  # a TensorRT-LLM checkout (BK docs/llmapi.md:16)
ENV = "SPECBUILD_LLMAPI_MODEL_DIR"


def model_dir_candidates() -> list[Path]:
    """Where NVIDIA's llmapi model.py may be, in order: $SPECBUILD_LLMAPI_MODEL_DIR, the container's
    /app/all_models, and triton_backend/ next to an importable tensorrt_llm (a source checkout)."""
    out = []
    if os.environ.get(ENV):
        out.append(Path(os.environ[ENV]))
    out.append(CONTAINER_MODEL_DIR)
    spec = importlib.util.find_spec("tensorrt_llm")
    if spec is not None and spec.submodule_search_locations:
        package = Path(list(spec.submodule_search_locations)[0])
        out += [package.parent / IN_SOURCE, package / IN_SOURCE]
    return out


def find_model_dir() -> Path:
    for folder in model_dir_candidates():
        if all((folder / name).is_file() for name in NVIDIA_FILES):
            return folder
    tried = ", ".join(str(p) for p in model_dir_candidates())
    raise UserError(f"NVIDIA's llmapi model (model.py, helpers.py) was not found (looked in {tried}) — run inside "
                    "the tritonserver:<yy.mm>-trtllm-python-py3 container (it has /app/all_models/llmapi/), or set "
                    f"{ENV} to the tensorrt_llm/1 folder of triton_backend/all_models/llmapi/ from a TensorRT-LLM "
                    "checkout of the installed release")


class TrtllmLlmApiRuntime(LlmApiFlavour):
    name = "tensorrt-llm"
    summary = "TensorRT-LLM's PyTorch backend behind NVIDIA's llmapi Triton model (model.yaml) on NVIDIA GPUs"
    model_files_label = "NVIDIA's llmapi model.py + helpers.py, copied from the installed TensorRT-LLM at compile"

    def checks(self, recipe, spec, options) -> Iterator[Finding]:
        yield from self.flavour_checks(recipe, spec)
        t, a = recipe.triton, recipe.llm_api
        if len(set(t.gpu_device_ids)) != len(t.gpu_device_ids) and a.instances == 1:
            yield Finding(("triton", "gpu_device_ids"), "lists a GPU twice — each rank needs its own GPU")
        if recipe.validation.sampling is not None:
            yield Finding(("validation", "sampling"), self.sampling_refusal(spec))
        if isinstance(spec.tree, DynamicTree) and a.release not in RELEASES_WITH_DYNAMIC_TREE:
            yield Finding(("speculation", "dynamic_tree"), f"TensorRT-LLM {a.release} drafts EAGLE-3 as a chain only "
                          "(its one-model worker \"only supports linear tree\"; dynamic trees arrived after 1.2) — "
                          "remove dynamic_tree, or use runtime: reference")

    def sampling_refusal(self, spec) -> str | None:
        return ("the sampling-distribution check runs on the reference runtime only: TensorRT-LLM's one-model EAGLE-3 "
                "and MTP take the argmax on both sides up to 1.2 unless allow_advanced_sampling is set, and its "
                "speculative sampling is not bit-exact — remove validation.sampling or use runtime: reference")

    def model_files(self) -> dict[str, Path]:
        folder = find_model_dir()
        return {name: folder / name for name in NVIDIA_FILES}

    def write_repository(self, recipe, layout, role, progress=None, notice=None) -> Path:
        from specbuild.trtllm.version import require_llmapi

        install = require_llmapi(recipe.llm_api.release)
        if progress:
            progress(f"TensorRT-LLM {install.version}; NVIDIA's llmapi model from {find_model_dir()}")
        return super().write_repository(recipe, layout, role, progress=progress, notice=notice)

    def serve_step(self, recipe, layout, repo_roles) -> ServeStep:
        import shlex

        info = launch_mode(recipe)
        details = {k: v for k, v in info.items() if k != "mode"}
        details["runs"] = shlex.join(server_command(recipe, show(layout.repository())))
        return ServeStep(headline=f"launch tritonserver ({info['mode']}, world size {info['world_size']})",
                         argv=("bash", show(layout.repository() / SCRIPT_NAME)), info=details)
