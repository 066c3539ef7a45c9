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
from typing import TYPE_CHECKING

from specbuild.trtllm.version import LLMAPI_MIN, version_supported
from specbuild.findings import Finding

if TYPE_CHECKING:
    pass

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


def ngc_tag(img) -> tuple[list[Finding], str | None]:
    """(findings, the TensorRT-LLM version it ships) of an NGC deploy.image.tag; version None when unknown."""
    m = re.match(r"^(\d\d\.\d\d)-(.+)$", img.tag)
    if not m or f"-{m.group(2)}" != TAG_SUFFIX:
        return [
            Finding(
                ("deploy", "image", "tag"),
                f"{img.tag!r} is not a `<yy.mm>{TAG_SUFFIX}` tag: only those NGC images carry the TensorRT-LLM backend",
            )
        ], None
    version = NGC_TRTLLM.get(m.group(1))
    if version is None:
        return [
            Finding(
                ("deploy", "image", "tag"),
                f"{img.tag}: specbuild does not know which TensorRT-LLM "
                f"container {m.group(1)} ships (its table ends at {max(NGC_TRTLLM)}) — pick a known "
                "tag, or name your own image in deploy.image.repository",
            )
        ], None
    return [], version


@dataclass(frozen=True)
class ImageChoice:
    repository: str
    tag: str
    trtllm_version: str | None  # None: an image specbuild cannot map (a custom repository)
    why: str

    @property
    def reference(self) -> str:
        return f"{self.repository}:{self.tag}"
