"""Which TensorRT-LLM is installed, and whether it serves the recipe's flavour (the version policy of both).

- engine flavour (trtllm-build, convert_checkpoint.py, the model classes' from_hugging_face, the C++ tensorrtllm
  backend): 0.17 up to 1.3.0rc20; the TensorRT engine backend was removed after that (TensorRT-LLM
  docs/source/legacy/tensorrt-backend-removal.md).
- llm-api flavour (the PyTorch backend's llmapi Triton model, model.yaml): 1.0 and newer (TensorRT-LLM
docs/source/release-notes.md@001eaec: 1.0 made the llmapi model PyTorch-only); its model.yaml dialect is the recipe's
llm_api.release, which must be the installed release.

tensorrt_llm is never imported here: importing the real wheel initialises CUDA and MPI, so the version comes from
the distribution metadata, or from a child process when there is none (a source checkout on PYTHONPATH).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import subprocess
import sys
from dataclasses import dataclass

from specbuild.errors import UserError
from specbuild.facts.ngc import ENGINE_MIN, LAST_ENGINE_RC, LLMAPI_MIN, llmapi_line

# tensorrtllm_backend renamed min_length/random_seed to min_tokens/seed and added return_num_*_tokens when its
# code moved into TensorRT-LLM (triton_backend/, 0.20); 0.17-0.19 read the old names
# (inflight_batcher_llm/tensorrt_llm/config.pbtxt of TensorRT-LLM@2a9abd95 vs tensorrtllm_backend@v0.19.0).
CURRENT_TENSOR_NAMES_SINCE = (0, 20)
PIP_SPEC = '"tensorrt_llm>=0.17,<=1.3.0rc20"'
LLMAPI_PIP_SPEC = '"tensorrt_llm>=1.0"'
NGC_IMAGE = "nvcr.io/nvidia/tritonserver:<yy.mm>-trtllm-python-py3"
HOW_TO_GET = (
    f"install it on a machine with an NVIDIA GPU: pip install {PIP_SPEC} --extra-index-url "
    f"https://pypi.nvidia.com, or work inside an NGC container {NGC_IMAGE} whose TensorRT-LLM is 0.17 to "
    "1.2.x (NVIDIA's support matrix lists the version per release); or set runtime: reference in the "
    "recipe to build CPU reference engines instead"
)


@dataclass(frozen=True)
class TrtllmInstall:
    version: str
    origin: str  # where the version was read: "metadata" or "import"

    @property
    def release(self) -> tuple[int, int]:
        return parse_release(self.version)

    @property
    def supported(self) -> bool:
        """Whether this version has the engine path (the engine flavour)."""
        return version_supported(self.version)

    @property
    def serves_llmapi(self) -> bool:
        return self.release >= LLMAPI_MIN


def parse_release(version: str) -> tuple[int, int]:
    """(major, minor) of a version string such as '1.2.0rc6', '0.17.0.post1' or '0.18.2'."""
    m = re.match(r"\s*v?(\d+)\.(\d+)", version)
    if not m:
        raise UserError(f"cannot read the TensorRT-LLM version '{version}' — reinstall tensorrt_llm ({PIP_SPEC})")
    return int(m.group(1)), int(m.group(2))


def parse_version(version: str) -> tuple[int, int, int, int]:
    """(major, minor, patch, rc) with rc = a large number for a final release (1.3.0 > 1.3.0rc20)."""
    m = re.match(r"\s*v?(\d+)\.(\d+)(?:\.(\d+))?(?:\.?rc(\d+))?", version)
    if not m:
        raise UserError(f"cannot read the TensorRT-LLM version '{version}' — reinstall tensorrt_llm ({PIP_SPEC})")
    major, minor, patch, rc = m.groups()
    return int(major), int(minor), int(patch or 0), int(rc) if rc is not None else 1 << 30


def version_supported(version: str) -> bool:
    """The engine flavour's range: 0.17 <= version <= 1.3.0rc20."""
    return ENGINE_MIN <= parse_release(version) and parse_version(version) <= LAST_ENGINE_RC


def _version_by_import() -> str:
    code = "import tensorrt_llm, sys; sys.stdout.write('\\n' + str(tensorrt_llm.__version__) + '\\n')"
    try:
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=os.environ.copy()
        )
    except subprocess.TimeoutExpired:
        raise UserError(
            "importing tensorrt_llm took more than 5 minutes — check the installation (python -c 'import tensorrt_llm')"
        ) from None
    lines = [ln for ln in out.stdout.splitlines() if ln.strip()]
    if out.returncode != 0 or not lines:
        tail = "\n".join(out.stderr.strip().splitlines()[-8:])
        raise UserError(
            f"tensorrt_llm is installed but fails to import:\n{tail}\n— fix the installation "
            f"(pip install {PIP_SPEC}) or use runtime: reference"
        )
    return lines[-1].strip()


def installed() -> TrtllmInstall | None:
    """The installed TensorRT-LLM, or None. Does not import it into this process."""
    if importlib.util.find_spec("tensorrt_llm") is None:
        return None
    for dist in ("tensorrt_llm", "tensorrt-llm"):
        try:
            return TrtllmInstall(importlib.metadata.version(dist), "metadata")
        except importlib.metadata.PackageNotFoundError:
            continue
    return TrtllmInstall(_version_by_import(), "import")


def require_trtllm() -> TrtllmInstall:
    """The installed TensorRT-LLM when its version has the engine path; a UserError that says what to do otherwise."""
    found = installed()
    if found is None:
        raise UserError(
            f"runtime: tensorrt-llm needs TensorRT-LLM, which is not installed in this Python "
            f"({sys.executable}) — {HOW_TO_GET}"
        )
    if not found.supported:
        if parse_version(found.version) > LAST_ENGINE_RC:
            why = (
                "TensorRT-LLM removed the TensorRT engine path (trtllm-build, convert_checkpoint.py) after "
                "1.3.0rc20; this recipe builds TensorRT engines — set flavour: llm-api to serve the same model "
                "through the LLM API"
            )
        else:
            why = "specbuild needs the engine-path speculative decoding of 0.17 or newer"
        raise UserError(
            f"TensorRT-LLM {found.version} is installed but the engine flavour supports 0.17 <= version "
            f"<= 1.3.0rc20: {why} — install a supported release: pip install {PIP_SPEC} (or use an NGC "
            f"container {NGC_IMAGE} whose TensorRT-LLM is 0.17 to 1.2.x), or use runtime: reference"
        )
    return found


def require_llmapi(release: str) -> TrtllmInstall:
    """The installed TensorRT-LLM when it serves the llm-api flavour in the recipe's llm_api.release dialect."""
    found = installed()
    if found is None:
        raise UserError(
            f"runtime: tensorrt-llm needs TensorRT-LLM, which is not installed in this Python "
            f"({sys.executable}) — install it on a machine with an NVIDIA GPU (pip install "
            f"{LLMAPI_PIP_SPEC} --extra-index-url https://pypi.nvidia.com), or work inside an NGC "
            f"container {NGC_IMAGE} (25.09 or newer); or set runtime: reference"
        )
    if not found.serves_llmapi:
        raise UserError(
            f"TensorRT-LLM {found.version} is installed but the llm-api flavour needs 1.0 or newer (the "
            "llmapi Triton model became PyTorch-only in 1.0) — install a newer release, or set "
            "flavour: engine"
        )
    installed_release, why_not = llmapi_line(found.version)
    if installed_release is None:
        raise UserError(f'{why_not} — install 1.3.0rc7 or later, or a 1.2.x with llm_api.release: "1.2"')
    if installed_release != release:
        raise UserError(
            f"llm_api.release is {release} but TensorRT-LLM {found.version} is installed: model.yaml's "
            f"spelling differs between releases (Eagle/Eagle3, DraftTarget/Draft_Target, "
            f'speculative_model_dir/speculative_model) — set llm_api.release: "{installed_release}" (or leave '
            "llm_api.release and deploy.image out: the installed release is then taken)"
        )
    return found


def legacy_tensor_names(found: TrtllmInstall | None = None) -> bool | None:
    """Whether the installed backend reads the <= 0.19 tensor names (min_length, random_seed); None when no
    TensorRT-LLM is installed here (the repository is then written for the current names)."""
    found = found if found is not None else installed()
    if found is None:
        return None
    return found.release < CURRENT_TENSOR_NAMES_SINCE


def installed_version() -> str | None:
    """The installed TensorRT-LLM's version (it picks the bundle's image tag), None when there is none or it cannot
    be read."""
    try:
        found = installed()
    except UserError:
        return None
    return found.version if found else None
