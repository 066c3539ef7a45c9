"""What an output was made from: `provenance.json` in every engine folder, repository, bundle and report.

    {"provenance": 1, "kind": "engine|repository|bundle|report", "output": <folder>, "created": <UTC time>,
     "recipe": {"path", "sha256", "text"},
     "checkpoints": {field: {"checkpoint", "path", ["model_id", "revision", "commit"], "files": {name: identity}}},
     "versions": {"specbuild", "python", "torch", "transformers", "tritonclient", "nvidia-pytriton",
                  "tensorrt_llm" (installed; null without), "tensorrt_llm_target" (deploy.image.trtllm_version),
                  "llm_api_release" (llm-api flavour: the model.yaml release line and why)},
     "plan": <specbuild plan --json's plan: steps, commands, outputs>}

A checkpoint file's identity is cheap: size, mtime and the SHA-256 of its head (a safetensors file's whole JSON
header, which names every tensor with its dtype, shape and offsets; the first 64 KiB of any other file; config
and tokenizer files whole). A hub checkpoint adds its revision and the commit it resolved to (specbuild.checkpoints.hub).

`diff_manifests(a, b)` names what differs between two manifests, one line per difference, for a comparison of
two reports or builds ("what changed between them"). The file is written atomically (write then rename).
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import platform
import struct
from importlib import metadata
from pathlib import Path
from typing import Any, Iterable

from specbuild import __version__
from specbuild.files.atomic import write_file
from specbuild.errors import UserError
from specbuild.checkpoints.hub import checkpoint_fields

MANIFEST = "provenance.json"
FORMAT = 1
HEAD_BYTES = 64 * 1024
WHOLE_BYTES = 4 * 1024 * 1024  # small files (configs, tokenizers) are hashed whole
# a safetensors header larger than this is not believed (a corrupt length): the head is hashed instead
MAX_SAFETENSORS_HEADER = 100 * 1024 * 1024
PACKAGES = ("torch", "transformers", "tritonclient", "nvidia-pytriton")


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _head(path: Path, size: int) -> tuple[str, str]:
    """(what was hashed, its SHA-256): a safetensors header, the whole of a small file, else its first 64 KiB."""
    with path.open("rb") as f:
        if path.suffix == ".safetensors" and size >= 8:
            (length,) = struct.unpack("<Q", f.read(8))
            if 8 + length <= size and length <= MAX_SAFETENSORS_HEADER:
                return "safetensors-header", _sha256(f.read(length))
            f.seek(0)
        if size <= WHOLE_BYTES:
            return "whole", _sha256(f.read())
        return f"first-{HEAD_BYTES}-bytes", _sha256(f.read(HEAD_BYTES))


def file_identity(path: Path) -> dict[str, Any]:
    st = path.stat()
    hashed, digest = _head(path, st.st_size)
    return {
        "size": st.st_size,
        "mtime": _dt.datetime.fromtimestamp(st.st_mtime, _dt.timezone.utc).isoformat(),
        "hashed": hashed,
        "sha256": digest,
    }


def folder_identity(folder: Path) -> dict[str, Any]:
    """The identities of a checkpoint folder's files (its top level and one level below, links followed)."""
    files: dict[str, Any] = {}
    if folder.is_file():
        return {folder.name: file_identity(folder)}
    if not folder.is_dir():
        return files
    for path in sorted([*folder.glob("*"), *folder.glob("*/*")]):
        rel = path.relative_to(folder).as_posix()
        if path.is_file() and not any(part.startswith(".") for part in path.relative_to(folder).parts):
            files[rel] = file_identity(path)
    return files


def _package_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def versions(recipe=None, runtime=None) -> dict[str, str | None]:
    """The tools' versions; the TensorRT-LLM installed here as the recipe's runtime reads it (`runtime`:
    Runtime.installed_release; None without one or without a runtime)."""
    out: dict[str, str | None] = {"specbuild": __version__, "python": platform.python_version()}
    out.update({name: _package_version(name) for name in PACKAGES})
    out["tensorrt_llm"] = runtime.installed_release() if runtime is not None else None
    out["tensorrt_llm_target"] = recipe.deploy.image.trtllm_version if recipe is not None else None
    if recipe is not None and recipe.flavour == "llm-api":  # which model.yaml line was written, and why
        out["llm_api_release"] = recipe.llm_release.said
    return out


def checkpoints(recipe) -> dict[str, Any]:
    out = {}
    for name, value in checkpoint_fields(recipe):
        try:
            resolved = recipe.checkpoint(value)
        except UserError as e:  # a model id this machine's hub cache lacks (validate needs no checkpoint)
            out[name] = {"checkpoint": str(value), "problem": str(e)}
            continue
        out[name] = {
            **{k: str(v) if isinstance(v, Path) else v for k, v in resolved.describe().items()},
            "files": folder_identity(Path(resolved.path)),
        }
    return out


def recipe_record(recipe) -> dict[str, Any]:
    source = recipe.source
    text = source.read_text() if source is not None and source.is_file() else None
    content = json.dumps(recipe.model_dump(mode="json"), sort_keys=True)  # what it says, comments and layout aside
    return {
        "path": str(source) if source is not None else None,
        "sha256": _sha256(text.encode()) if text is not None else None,
        "text": text,
        "content_sha256": _sha256(content.encode()),
    }


def make_manifest(recipe, kind: str, output: Path, *, plan: dict | None = None, runtime=None) -> dict[str, Any]:
    """The manifest of one output folder (`kind`: engine, repository, bundle or report) built from `recipe` for
    its `runtime` (specbuild.runtimes: it says which TensorRT-LLM is installed)."""
    return {
        "provenance": FORMAT,
        "kind": kind,
        "output": str(output),
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "recipe": recipe_record(recipe),
        "checkpoints": checkpoints(recipe),
        "versions": versions(recipe, runtime),
        "plan": plan,
    }


def write_manifest(folder: Path, manifest: dict[str, Any]) -> Path:
    """Write folder/provenance.json atomically (a partial file renamed into place)."""
    return write_file(Path(folder) / MANIFEST, json.dumps(manifest, indent=2, sort_keys=False) + "\n")


def stamp(folder: Path, manifest: dict[str, Any], kind: str) -> Path | None:
    """Write `manifest` as the provenance of the output `folder` of `kind`; None when there is no such folder."""
    folder = Path(folder)
    if not folder.is_dir():
        return None
    return write_manifest(folder, {**manifest, "kind": kind, "output": str(folder)})


def read_manifest(path: Path) -> dict[str, Any]:
    """A manifest from its file or the folder holding it."""
    path = Path(path)
    return json.loads((path / MANIFEST if path.is_dir() else path).read_text())


# Keys that differ between any two outputs without their inputs differing (`step`: the output's own key and
# content hash, specbuild.cache.step_cache; its inputs are compared one by one).
NOT_COMPARED = {("created",), ("output",), ("kind",), ("step",)}


def diff_manifests(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """What differs between two manifests, one line each, as `path: a -> b` (`path` dotted; the recipe's text
    is compared through its hash and, when it differs, line by line in a unified diff)."""
    lines: list[str] = []
    _diff(a, b, (), lines)
    ta, tb = (m.get("recipe", {}).get("text") for m in (a, b))
    if ta is not None and tb is not None and ta != tb:
        import difflib

        changed = [
            ln
            for ln in difflib.unified_diff(ta.splitlines(), tb.splitlines(), lineterm="", n=0)
            if ln[:1] in "+-" and not ln.startswith(("+++", "---"))
        ]
        lines += [f"recipe.text: {ln}" for ln in changed]
    return lines


def _show(value: Any) -> str:
    return json.dumps(value, default=str) if not isinstance(value, str) else value


def _diff(a: Any, b: Any, path: tuple, lines: list[str]) -> None:
    if path in NOT_COMPARED or path == ("recipe", "text"):
        return
    where = ".".join(str(p) for p in path) or "<manifest>"
    if isinstance(a, dict) and isinstance(b, dict):
        for key in _keys(a, b):
            inner = ".".join(str(p) for p in (*path, key))
            if (*path, key) in NOT_COMPARED:
                continue
            if key not in a:
                lines.append(f"{inner}: added ({_short(b[key])})")
            elif key not in b:
                lines.append(f"{inner}: removed (was {_short(a[key])})")
            else:
                _diff(a[key], b[key], (*path, key), lines)
        return
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            _diff(x, y, (*path, i), lines)
        return
    if a != b:
        lines.append(f"{where}: {_short(a)} -> {_short(b)}")


def _keys(a: dict, b: dict) -> Iterable[str]:
    return [*a, *(k for k in b if k not in a)]


def _short(value: Any, limit: int = 120) -> str:
    text = _show(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"
