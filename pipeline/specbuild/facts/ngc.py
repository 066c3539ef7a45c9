"""NVIDIA's NGC Triton containers with the TensorRT-LLM backend, and the TensorRT-LLM release inside each:
`nvcr.io/nvidia/tritonserver:<yy.mm>-trtllm-python-py3` (triton-inference-server/server
docs/introduction/compatibility.md@e1db8a6, the trtllm-python-py3 rows). Data and version arithmetic only: the
recipe resolves the llm-api flavour's TensorRT-LLM release from it (specbuild.recipe.llm_release) and the deployment
bundle picks its image from it (specbuild.deploy.images)."""

from __future__ import annotations

import re

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


def release_of(version: str) -> str:
    """'1.2.1' -> '1.2' (the llm_api.release a TensorRT-LLM version speaks)."""
    return "{}.{}".format(*release3(version)[:2])


def tag_for(trtllm_version: str) -> str | None:
    """The newest container tag whose TensorRT-LLM has this major.minor.patch, or None."""
    want = release3(trtllm_version)
    tags = [yymm for yymm, v in NGC_TRTLLM.items() if release3(v) == want]
    return max(tags) + TAG_SUFFIX if tags else None


def trtllm_of_tag(tag: str) -> str | None:
    """The TensorRT-LLM an NGC `<yy.mm>-trtllm-python-py3` tag ships (None: not such a tag, or not in the table)."""
    m = _TAG.match(tag)
    return NGC_TRTLLM.get(m.group("yymm")) if m else None


# --- the llm-api flavour's release lines ----------------------------------------------------------------------------
# (specbuild.repository.llmapi.releases has each line's rules and sources)
# The 1.3 line follows llm_args.py of main after 1.3.0rc3 (the llmapi sheet's source, @0004396), whose imports match
# the 1.3.0rc7 docs' source: it covers 1.3.0rc7 and later. 1.3.0rc0-rc3 still parse speculative_config through
# from_dict (refusing Draft_Target); what rc4-rc6 parse is not known.
UNION_FROM = (1, 3, 0, 7)
# The newest TensorRT-LLM whose own text was read (the API reference of 1.3.0rc29): later versions are written in the
# 1.3 line's spelling with a note.
NEWEST_READ = (1, 3, 0, 29)
_VERSION = re.compile(r"\s*v?(\d+)\.(\d+)(?:\.(\d+))?(?:\.?rc(\d+))?")
FINAL = 1 << 30  # a final release sorts after its candidates (1.3.0 > 1.3.0rc29)


def version4(version: str) -> tuple[int, int, int, int]:
    """(major, minor, patch, rc) of a TensorRT-LLM version, rc FINAL for a final release; ValueError if not one."""
    m = _VERSION.match(version)
    if not m:
        raise ValueError(f"not a TensorRT-LLM version: {version!r}")
    major, minor, patch, rc = m.groups()
    return int(major), int(minor), int(patch or 0), int(rc) if rc is not None else FINAL


# Which releases serve each flavour. The engine flavour: 0.17 up to 1.3.0rc20, the last release with the TensorRT
# engine path (TensorRT-LLM docs/source/legacy/tensorrt-backend-removal.md); the llm-api flavour: 1.0 and newer
# (docs/source/release-notes.md@001eaec: 1.0 made the llmapi Triton model PyTorch-only).
ENGINE_MIN = (0, 17)
LAST_ENGINE_RC = (1, 3, 0, 20)
LLMAPI_MIN = (1, 0)


def has_engine_path(version: str) -> bool:
    """Whether a TensorRT-LLM version serves the engine flavour (ValueError if not a version)."""
    v = version4(version)
    return ENGINE_MIN <= v[:2] and v <= LAST_ENGINE_RC


def llmapi_line(version: str) -> tuple[str | None, str]:
    """(the release line whose model.yaml a TensorRT-LLM version reads, what to say of it): None with the reason when
    no line fits it (older than 1.0; 1.3.0rc0-rc6); a line with "" or a note (a version newer than any read)."""
    v = version4(version)
    if v[:2] < (1, 0):
        return None, (
            f"TensorRT-LLM {version} predates the llm-api flavour, which needs 1.0 or newer (the llmapi Triton "
            "model became PyTorch-only in 1.0; NGC containers 25.09 and later)"
        )
    if v[:2] < (1, 3):
        return "{}.{}".format(*v[:2]), ""
    if v[:3] == (1, 3, 0) and v < UNION_FROM:
        return None, (
            f"TensorRT-LLM {version} lies before the 1.3 line specbuild writes (1.3.0rc7 and later): 1.3.0rc0-rc3 "
            "still parse speculative_config through from_dict and refuse Draft_Target, and what rc4-rc6 parse is "
            "not known"
        )
    if v > NEWEST_READ:
        return "1.3", (
            f"TensorRT-LLM {version} is newer than any source specbuild read (1.3.0rc29): model.yaml is written "
            "in the 1.3 line's spelling; compile hands it to the installed release's own parser where it runs"
        )
    return "1.3", ""
