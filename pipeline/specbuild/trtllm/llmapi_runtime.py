"""The tensorrt-llm runtime in the llm-api flavour: TensorRT-LLM's PyTorch backend behind NVIDIA's llmapi Triton
model (TensorRT-LLM triton_backend/all_models/llmapi/tensorrt_llm/). Nothing is built ahead of time: the repository
holds model.yaml (from the recipe), config.pbtxt and NVIDIA's model.py + helpers.py (never shipped by specbuild), taken
from, in order:

1. a folder the user gives (`specbuild compile --llmapi-model-dir`, or $SPECBUILD_LLMAPI_MODEL_DIR);
2. the machine's TensorRT-LLM: /app/all_models/llmapi/ of the tritonserver trtllm container, or
   triton_backend/all_models/llmapi/ beside an importable tensorrt_llm source checkout;
3. otherwise none: the repository is written without them and its launch_triton.sh copies them at start from the
   container it runs in (specbuild.repository.llmapi.launch), so a CPU machine without TensorRT-LLM writes the repository and
   the deployment bundle.

Where TensorRT-LLM is installed, every model.yaml goes through the installed release's own parse functions before
anything is written (specbuild.trtllm.llmapi_parse).
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from specbuild.errors import UserError
from specbuild.repository.llmapi.flavour import LlmApiFlavour
from specbuild.repository.llmapi.configs import GPU_IDS_PARAMETER
from specbuild.repository.llmapi.launch import (
    CONTAINER_MODEL_DIR,
    NVIDIA_FILES,
    SCRIPT_NAME,
    launch_mode,
    server_command,
)
from specbuild.findings import Finding
from specbuild.files.paths import show
from specbuild.plan import ServeStep
from specbuild.repository.llmapi.writer import write_repository
from specbuild.trtllm.llmapi_parse import check_model_yaml
from specbuild.trtllm.method_part import part_for
from specbuild.trtllm.version import installed, installed_version, require_llmapi

IN_SOURCE = Path("triton_backend/all_models/llmapi/tensorrt_llm/1")  # a TensorRT-LLM checkout (tensorrtllm_backend
# docs/llmapi.md@0b9d7d5)
ENV = "SPECBUILD_LLMAPI_MODEL_DIR"
# GPU_IDS_PARAMETER: what NVIDIA's model.py reads for multi-instance serving (model.py@044a90d, 2026-02 on; the model.py
# of 1.0/1.1, @b35ac1b, reads no parameter): a model.py that does not name it puts every instance on the same GPUs.


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


def _complete(folder: Path) -> bool:
    return all((folder / name).is_file() for name in NVIDIA_FILES)


def given_model_dir() -> Path | None:
    """The folder the user named ($SPECBUILD_LLMAPI_MODEL_DIR, set by --llmapi-model-dir); a UserError when it does
    not hold NVIDIA's two files."""
    value = os.environ.get(ENV)
    if not value:
        return None
    folder = Path(value)
    missing = [name for name in NVIDIA_FILES if not (folder / name).is_file()]
    if missing:
        raise UserError(
            f"{ENV}={folder}: {', '.join(missing)} not found there — give the tensorrt_llm/1 folder of "
            "triton_backend/all_models/llmapi/ (TensorRT-LLM checkout of the release you run) or "
            f"{CONTAINER_MODEL_DIR} copied from the tritonserver trtllm container"
        )
    return folder


def found_model_dir() -> Path | None:
    """NVIDIA's llmapi model folder on this machine, or None (then launch_triton.sh takes it from the container)."""
    given = given_model_dir()
    if given is not None:
        return given
    return next((folder for folder in model_dir_candidates() if _complete(folder)), None)


def find_model_dir() -> Path:
    folder = found_model_dir()
    if folder is not None:
        return folder
    tried = ", ".join(str(p) for p in model_dir_candidates())
    raise UserError(
        f"NVIDIA's llmapi model (model.py, helpers.py) was not found (looked in {tried}) — run inside "
        "the tritonserver:<yy.mm>-trtllm-python-py3 container (it has /app/all_models/llmapi/), or set "
        f"{ENV} (specbuild compile --llmapi-model-dir) to the tensorrt_llm/1 folder of "
        "triton_backend/all_models/llmapi/ from a TensorRT-LLM checkout of the installed release"
    )


def reads_gpu_device_ids(model_py: Path) -> bool:
    """Whether this model.py reads config.pbtxt's gpu_device_ids (multi-instance serving)."""
    return GPU_IDS_PARAMETER in model_py.read_text(errors="replace")


def multi_instance_refusal(recipe, folder: Path | None) -> str | None:
    """Why llm_api.instances > 1 cannot be served with the model.py in `folder` (None: it can, or it is not known
    until launch_triton.sh sees the container's model.py)."""
    if recipe.llm_api.instances <= 1 or folder is None or reads_gpu_device_ids(folder / "model.py"):
        return None
    return (
        f"{folder / 'model.py'} does not read config.pbtxt's {GPU_IDS_PARAMETER} (NVIDIA's llmapi model reads it "
        "from its multi-instance version on, 2026-02; the 1.0/1.1 model.py does not), so every instance would "
        "load the LLM on the same GPUs — set llm_api.instances: 1 (scale with replicas), or use the model.py of "
        "a release that has multi-instance serving"
    )


@dataclass(frozen=True)
class ModelSource:
    """Where the repository's model.py + helpers.py come from."""

    folder: Path | None  # None: launch_triton.sh copies them at start from the container

    @property
    def files(self) -> dict[str, Path]:
        return {} if self.folder is None else {name: self.folder / name for name in NVIDIA_FILES}

    def describe(self) -> str:
        if self.folder is None:
            return (
                f"NVIDIA's llmapi model.py + helpers.py: none on this machine, launch_triton.sh copies them at "
                f"start from {CONTAINER_MODEL_DIR} (the tritonserver trtllm container; LLMAPI_MODEL_DIR "
                "overrides)"
            )
        return f"NVIDIA's llmapi model from {self.folder}"


class TrtllmLlmApiRuntime(LlmApiFlavour):
    name = "tensorrt-llm"
    summary = "TensorRT-LLM's PyTorch backend behind NVIDIA's llmapi Triton model (model.yaml) on NVIDIA GPUs"
    model_files_label = (
        "NVIDIA's llmapi model.py + helpers.py: copied at compile from --llmapi-model-dir or the "
        "machine's TensorRT-LLM; without one, launch_triton.sh copies them at start from "
        f"{CONTAINER_MODEL_DIR} of the tritonserver trtllm container"
    )

    def checks(self, recipe, spec, options) -> Iterator[Finding]:
        yield from self.flavour_checks(recipe, spec)
        t, a = recipe.triton, recipe.llm_api
        if len(set(t.gpu_device_ids)) != len(t.gpu_device_ids) and a.instances == 1:
            yield Finding(("triton", "gpu_device_ids"), "lists a GPU twice — each rank needs its own GPU")
        if recipe.validation.sampling is not None:
            yield Finding(("validation", "sampling"), self.sampling_refusal(spec))
        yield from part_for(spec).llmapi_checks(recipe, spec)
        if a.instances > 1:
            try:
                refusal = multi_instance_refusal(recipe, found_model_dir())
            except UserError as e:  # a --llmapi-model-dir without the files: compile says it
                refusal = str(e)
            if refusal:
                yield Finding(("llm_api", "instances"), refusal)

    def notes(self, recipe, spec) -> list[str]:
        out = super().notes(recipe, spec)
        if recipe.llm_api.instances > 1:
            out.append(
                f"llm_api.instances {recipe.llm_api.instances}: NVIDIA's model.py must read config.pbtxt's "
                f"{GPU_IDS_PARAMETER}; compile checks the model.py it copies, and launch_triton.sh checks the "
                "container's at start when none was copied"
            )
        return out

    def sampling_refusal(self, spec) -> str | None:
        return (
            "the sampling-distribution check runs on the reference runtime only: TensorRT-LLM's one-model EAGLE-3 "
            "and MTP take the argmax on both sides up to 1.2 unless allow_advanced_sampling is set, and its "
            "speculative sampling is not bit-exact — remove validation.sampling or use runtime: reference"
        )

    def installed_release(self) -> str | None:
        return installed_version()

    def written_from(self) -> dict[str, Any]:
        # where NVIDIA's llmapi model.py is taken from when the machine names it
        return {"llmapi_model_dir": os.environ.get(ENV)}

    def model_source(self) -> ModelSource:
        return ModelSource(found_model_dir())

    def model_files(self) -> dict[str, Path]:
        return self.model_source().files

    def write_repository(self, recipe, spec, layout, role, progress=None, notice=None, engines_built=True) -> Path:
        install = require_llmapi(recipe.llm_api.release) if installed() is not None else None
        source = self.model_source()
        refusal = multi_instance_refusal(recipe, source.folder)
        if refusal:
            raise UserError(f"{recipe.source or 'recipe'}: llm_api.instances: {refusal}")
        if progress:
            progress(f"TensorRT-LLM {install.version if install else 'not installed here'}; {source.describe()}")
        if install is None and notice and role == "target":
            notice(
                "TensorRT-LLM is not installed here: model.yaml is written in llm_api.release "
                f"{recipe.llm_api.release}'s spelling (README 'LLM-API releases') without being parsed by "
                "TensorRT-LLM itself; compile on a machine with TensorRT-LLM parses it with that release first"
            )
        if install is None and source.folder is None and notice and role == "target":
            notice(source.describe())
        validate = None if install is None else (lambda text: check_model_yaml(text, install, recipe, role))
        return write_repository(
            recipe, spec, layout, role, source.files, progress=progress, notice=notice, validate=validate
        )

    def serve_step(self, recipe, spec, layout, repo_roles) -> ServeStep:
        import shlex

        info = launch_mode(recipe)
        details = {k: v for k, v in info.items() if k != "mode"}
        details["runs"] = shlex.join(server_command(recipe, show(layout.repository())))
        return ServeStep(
            headline=f"launch tritonserver ({info['mode']}, world size {info['world_size']})",
            argv=("bash", show(layout.repository() / SCRIPT_NAME)),
            info=details,
        )
