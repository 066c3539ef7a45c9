"""Which NGC image serves a recipe: `nvcr.io/nvidia/tritonserver:<yy.mm>-trtllm-python-py3`, chosen by the
TensorRT-LLM release that built the engines (triton-inference-server/server docs/introduction/compatibility.md@e1db8a6),
or, in the llm-api flavour, by the release whose model.yaml spelling the repository is written in (llm_api.release;
TensorRT-LLM 1.0 and newer, containers 25.09 and later: server docs/introduction/compatibility.md@e1db8a6).

The table is NVIDIA's (triton-inference-server/server docs/introduction/compatibility.md, the trtllm-python-py3
rows). The Triton server version of a container is not computed: only the container tag matters here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from specbuild.trtllm.version import LLMAPI_MIN, version_supported
from specbuild.deploy.kind import deploy_kind

if TYPE_CHECKING:
    from specbuild.recipe.schema import Recipe
    from specbuild.runtimes.base import Runtime

NGC_REPOSITORY = "nvcr.io/nvidia/tritonserver"
TAG_SUFFIX = "-trtllm-python-py3"
# container <yy.mm> -> the TensorRT-LLM release inside it
NGC_TRTLLM: dict[str, str] = {
    "26.07": "1.2.1",
    "26.06": "1.2.1",
    "26.05": "1.2.1",
    "26.04": "1.2.1",
    "26.03": "1.2.0",
    "26.02": "1.1.0",
    "26.01": "1.1.0",
    "25.12": "1.1.0",
    "25.11": "1.0.3.2510",
    "25.10": "1.0.0",
    "25.09": "1.0.0",
    "25.08": "0.21.0",
    "25.07": "0.20.0",
    "25.06": "0.20.0",
    "25.05": "0.19.0",
    "25.04": "0.18.2",
    "25.03": "0.18.0",
    "25.02": "0.17.0.post1",
    "25.01": "0.17.0",
    "24.12": "0.16.0",
    "24.11": "0.15.0",
    "24.10": "0.14.0",
    "24.09": "0.13.0",
    "24.08": "0.12.0",
    "24.07": "0.11.0",
    "24.06": "0.10.0",
    "24.05": "0.9.0",
    "24.04": "0.9.0",
}
_TAG = re.compile(r"^(?P<yymm>\d\d\.\d\d)" + re.escape(TAG_SUFFIX) + "$")


def release3(version: str) -> tuple[int, ...]:
    """(major, minor, patch) of '1.2.1', '0.17.0.post1', '1.2.0rc6' ('1.0.3.2510' -> (1, 0, 3))."""
    m = re.match(r"\s*v?(\d+)\.(\d+)(?:\.(\d+))?", version)
    if not m:
        raise ValueError(f"not a TensorRT-LLM version: {version!r}")
    return tuple(int(g or 0) for g in m.groups())


def supported(version: str) -> bool:
    """The engine flavour's version policy (specbuild.trtllm.version)."""
    return version_supported(version)


def newest_supported() -> str:
    return max((v for v in NGC_TRTLLM.values() if supported(v)), key=release3)


def serves_llmapi(version: str) -> bool:
    """The llm-api flavour's version policy: TensorRT-LLM 1.0 and newer (specbuild.trtllm.version)."""
    return release3(version)[:2] >= LLMAPI_MIN


def release_of(version: str) -> str:
    """'1.2.1' -> '1.2' (the llm_api.release a TensorRT-LLM version speaks)."""
    return "{}.{}".format(*release3(version)[:2])


def newest_of_release(release: str) -> str | None:
    """The newest TensorRT-LLM an NGC container ships within `release` ('1.2' -> '1.2.1'), or None."""
    found = [v for v in NGC_TRTLLM.values() if release_of(v) == release]
    return max(found, key=release3) if found else None


def llmapi_releases() -> list[str]:
    """The llm_api.release values some NGC container ships."""
    return sorted({release_of(v) for v in NGC_TRTLLM.values() if serves_llmapi(v)}, key=release3)


def tag_for(trtllm_version: str) -> str | None:
    """The newest container tag whose TensorRT-LLM has this major.minor.patch, or None."""
    want = release3(trtllm_version)
    tags = [yymm for yymm, v in NGC_TRTLLM.items() if release3(v) == want]
    return max(tags) + TAG_SUFFIX if tags else None


def trtllm_of_tag(tag: str) -> str | None:
    m = _TAG.match(tag)
    return NGC_TRTLLM.get(m.group("yymm")) if m else None


@dataclass(frozen=True)
class ImageChoice:
    repository: str
    tag: str
    trtllm_version: str | None  # None: an image specbuild cannot map (a custom repository)
    why: str

    @property
    def reference(self) -> str:
        return f"{self.repository}:{self.tag}"


def choose_image(recipe: Recipe, trtllm_version: str | None = None) -> ImageChoice:
    """The image of the bundle, by the recipe's kind (specbuild.deploy.kind). Raises ValueError when no tag fits
    (deploy_findings reports it against the recipe first)."""
    return IMAGE_KINDS[deploy_kind(recipe)](recipe, trtllm_version)


def engine_image(recipe: Recipe, trtllm_version: str | None = None) -> ImageChoice:
    """deploy.image.tag when given, else the tag of the TensorRT-LLM release that built the engines
    (`trtllm_version`, from compile), else of deploy.image.trtllm_version, else the newest supported."""
    img = recipe.deploy.image
    if img.tag:
        known = trtllm_of_tag(img.tag) if img.repository == NGC_REPOSITORY else None
        return ImageChoice(img.repository, img.tag, known, "deploy.image.tag")
    version = img.trtllm_version or trtllm_version or newest_supported()
    tag = tag_for(version)
    if tag is None:
        raise ValueError(f"no NGC tritonserver image ships TensorRT-LLM {version}")
    why = (
        "deploy.image.trtllm_version"
        if img.trtllm_version
        else "the TensorRT-LLM that built the engines"
        if trtllm_version
        else "the newest TensorRT-LLM specbuild supports"
    )
    return ImageChoice(img.repository, tag, version, f"{why} ({version})")


def llmapi_image(recipe: Recipe, trtllm_version: str | None = None) -> ImageChoice:
    """deploy.image.tag when given, else the tag of deploy.image.trtllm_version, else of the installed TensorRT-LLM
    (`trtllm_version`, from compile, which checked it is llm_api.release), else the newest container of
    llm_api.release."""
    img = recipe.deploy.image
    if img.tag:
        known = trtllm_of_tag(img.tag) if img.repository == NGC_REPOSITORY else None
        return ImageChoice(img.repository, img.tag, known, "deploy.image.tag")
    release = recipe.llm_api.release
    if img.trtllm_version:
        version, why = img.trtllm_version, "deploy.image.trtllm_version"
    elif trtllm_version and tag_for(trtllm_version):
        version, why = trtllm_version, "the installed TensorRT-LLM"
    else:  # (an installed build no container ships, e.g. a nightly of the release: the release's newest container)
        version, why = newest_of_release(release), f"the newest container of llm_api.release {release}"
    if version is None:
        raise ValueError(f"no NGC tritonserver image ships TensorRT-LLM {release} (llm_api.release)")
    tag = tag_for(version)
    if tag is None:
        raise ValueError(f"no NGC tritonserver image ships TensorRT-LLM {version}")
    return ImageChoice(img.repository, tag, version, f"{why} ({version})")


def llmapi_no_image(recipe: Recipe) -> str | None:
    """Why an llm-api recipe gets no bundle: its llm_api.release is in no NGC container and deploy.image names
    none (a TensorRT-LLM installed from pip serves it, but the bundle would have no image to run)."""
    img, release = recipe.deploy.image, recipe.llm_api.release
    if img.tag or img.trtllm_version or newest_of_release(release) is not None:
        return None
    return (
        f"no NGC tritonserver container ships TensorRT-LLM {release} (llm_api.release) yet (those that do: "
        f"{', '.join(llmapi_releases())}) — set deploy.image.repository and deploy.image.tag to an image with "
        f"TensorRT-LLM {release} to get one"
    )


# Per kind: why a recipe the runtime would bundle gets none (None: it gets one)
NO_IMAGE: dict[str, Callable[[Recipe], str | None]] = {"engine": lambda recipe: None, "llm-api": llmapi_no_image}


IMAGE_KINDS: dict[str, Callable[[Recipe, str | None], ImageChoice]] = {"engine": engine_image, "llm-api": llmapi_image}


def applies(recipe: Recipe, runtime: Runtime) -> str | None:
    """None when the recipe gets a bundle; else why not (said by `plan` and `compile`): its runtime's refusal
    (the reference runtime serves on CPU), or no image to run (llm-api: a release no NGC container ships)."""
    return runtime.bundle_refusal or NO_IMAGE[deploy_kind(recipe)](recipe)
