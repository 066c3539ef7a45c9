"""Which NGC image serves a recipe: `nvcr.io/nvidia/tritonserver:<yy.mm>-trtllm-python-py3`, chosen by the
TensorRT-LLM release that built the engines (triton-inference-server/server docs/introduction/compatibility.md@e1db8a6),
or, in the llm-api flavour, by the release whose model.yaml spelling the repository is written in (llm_api.release;
TensorRT-LLM 1.0 and newer, containers 25.09 and later: server docs/introduction/compatibility.md@e1db8a6).

The table is NVIDIA's (specbuild/facts/ngc.py: triton-inference-server/server docs/introduction/compatibility.md, the
trtllm-python-py3 rows). The Triton server version of a container is not computed: only the container tag matters
here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from specbuild.facts.ngc import (
    LLMAPI_MIN,
    NGC_REPOSITORY,
    NGC_TRTLLM,
    TAG_SUFFIX,
    has_engine_path,
    release3,
    release_of,
    tag_for,
    trtllm_of_tag,
)
from specbuild.findings import Finding


def supported(version: str) -> bool:
    """The engine flavour's version policy (specbuild.facts.ngc)."""
    return has_engine_path(version)


def newest_supported() -> str:
    return max((v for v in NGC_TRTLLM.values() if supported(v)), key=release3)


def serves_llmapi(version: str) -> bool:
    """The llm-api flavour's version policy: TensorRT-LLM 1.0 and newer (specbuild.facts.ngc)."""
    return release3(version)[:2] >= LLMAPI_MIN


def newest_of_release(release: str) -> str | None:
    """The newest TensorRT-LLM an NGC container ships within `release` ('1.2' -> '1.2.1'), or None."""
    found = [v for v in NGC_TRTLLM.values() if release_of(v) == release]
    return max(found, key=release3) if found else None


def llmapi_releases() -> list[str]:
    """The llm_api.release values some NGC container ships."""
    return sorted({release_of(v) for v in NGC_TRTLLM.values() if serves_llmapi(v)}, key=release3)


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


__all__ = [  # the table and its arithmetic live in specbuild.facts.ngc (the recipe reads them too)
    "NGC_REPOSITORY",
    "NGC_TRTLLM",
    "TAG_SUFFIX",
    "ImageChoice",
    "llmapi_releases",
    "newest_of_release",
    "newest_supported",
    "ngc_tag",
    "release3",
    "release_of",
    "serves_llmapi",
    "supported",
    "tag_for",
    "trtllm_of_tag",
]
