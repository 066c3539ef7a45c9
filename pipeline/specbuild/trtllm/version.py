"""Which TensorRT-LLM is installed, and whether it still has the engine path specbuild drives.

The TensorRT engine path (trtllm-build, convert_checkpoint.py, the model classes' from_hugging_face) ships from
0.17 to 1.2.x; after 1.2 it was removed (engine fact sheet §0, §7). tensorrt_llm is never imported here: importing
the real wheel initialises CUDA and MPI, so the version comes from the distribution metadata, or from a child
process when there is none (a source checkout on PYTHONPATH).
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

MIN_VERSION = (0, 17)
# tensorrtllm_backend renamed min_length/random_seed to min_tokens/seed and added return_num_*_tokens when its
# code moved into TensorRT-LLM (triton_backend/, 0.20); 0.17-0.19 read the old names (repository fact sheet §1.3,
# §8 item 4).
CURRENT_TENSOR_NAMES_SINCE = (0, 20)
END_VERSION = (1, 3)  # exclusive: the engine path is gone after 1.2.x (fact sheet §7)
PIP_SPEC = '"tensorrt_llm>=0.17,<1.3"'
NGC_IMAGE = "nvcr.io/nvidia/tritonserver:<yy.mm>-trtllm-python-py3"
HOW_TO_GET = (f"install it on a machine with an NVIDIA GPU: pip install {PIP_SPEC} --extra-index-url "
              f"https://pypi.nvidia.com, or work inside an NGC container {NGC_IMAGE} whose TensorRT-LLM is 0.17 to "
              "1.2.x (NVIDIA's support matrix lists the version per release); or set runtime: reference in the "
              "recipe to build CPU reference engines instead")


@dataclass(frozen=True)
class TrtllmInstall:
    version: str
    origin: str  # where the version was read: "metadata" or "import"

    @property
    def release(self) -> tuple[int, int]:
        return parse_release(self.version)

    @property
    def supported(self) -> bool:
        return version_supported(self.version)


def parse_release(version: str) -> tuple[int, int]:
    """(major, minor) of a version string such as '1.2.0rc6', '0.17.0.post1' or '0.18.2'."""
    m = re.match(r"\s*v?(\d+)\.(\d+)", version)
    if not m:
        raise UserError(f"cannot read the TensorRT-LLM version '{version}' — reinstall tensorrt_llm ({PIP_SPEC})")
    return int(m.group(1)), int(m.group(2))


def version_supported(version: str) -> bool:
    return MIN_VERSION <= parse_release(version) < END_VERSION


def _version_by_import() -> str:
    code = "import tensorrt_llm, sys; sys.stdout.write('\\n' + str(tensorrt_llm.__version__) + '\\n')"
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                             env=os.environ.copy())
    except subprocess.TimeoutExpired:
        raise UserError("importing tensorrt_llm took more than 5 minutes — check the installation "
                        "(python -c 'import tensorrt_llm')") from None
    lines = [ln for ln in out.stdout.splitlines() if ln.strip()]
    if out.returncode != 0 or not lines:
        tail = "\n".join(out.stderr.strip().splitlines()[-8:])
        raise UserError(f"tensorrt_llm is installed but fails to import:\n{tail}\n— fix the installation "
                        f"(pip install {PIP_SPEC}) or use runtime: reference")
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
        raise UserError(f"runtime: tensorrt-llm needs TensorRT-LLM, which is not installed in this Python "
                        f"({sys.executable}) — {HOW_TO_GET}")
    if not found.supported:
        if found.release >= END_VERSION:
            why = ("TensorRT-LLM removed the TensorRT engine path (trtllm-build, convert_checkpoint.py) after 1.2; "
                   "specbuild builds TensorRT engines")
        else:
            why = "specbuild needs the engine-path speculative decoding of 0.17 or newer"
        raise UserError(f"TensorRT-LLM {found.version} is installed but specbuild supports 0.17 <= version < 1.3: "
                        f"{why} — install a supported release: pip install {PIP_SPEC} (or use an NGC container "
                        f"{NGC_IMAGE} whose TensorRT-LLM is 0.17 to 1.2.x), or use runtime: reference")
    return found


def legacy_tensor_names(found: TrtllmInstall | None = None) -> bool | None:
    """Whether the installed backend reads the <= 0.19 tensor names (min_length, random_seed); None when no
    TensorRT-LLM is installed here (the repository is then written for the current names)."""
    found = found if found is not None else installed()
    if found is None:
        return None
    return found.release < CURRENT_TENSOR_NAMES_SINCE
