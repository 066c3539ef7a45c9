"""Reusing a step's output when nothing it reads has changed: `compile` skips writing a repository, and serving
and validating, when the output already in place was made from the same inputs.

Each step has a key: the SHA-256 of what it reads, as canonical JSON (`step_key`):

    engines     the recipe without its `validation`, `triton` and `deploy` sections, the plan's engine steps (their
                commands and settings), the checkpoints' identities, the installed versions (not the bundle's
                target release), specbuild's own code and the command-line options that change a build; each
                engine folder's key is that stage key with its role (`engine_key`)
    repository  the recipe without its `validation` section, the checkpoints' identities (provenance: hub commit,
                size, mtime and header hash of each file), the versions (specbuild, torch, TensorRT-LLM ...),
                specbuild's own code, the role and the layout's folders
    validate    every repository key, the whole recipe, the tritonserver that serves (its path and the
                nvidia-pytriton release) and the decoding CPUs; only a passing verdict is reused

The key is recorded in the output's provenance.json (`step.key`) with the SHA-256 of the output's files
(`step.content`). An output is reused only when both still hold: same key (nothing read has changed) and same
content (nothing was edited, removed or half-written since). Hashing a 100 GB engine takes minutes, so the record
also keeps the files' paths, sizes and modification times (`step.stats`, taken before the hash): while they are
unchanged the content is taken as unchanged and no byte is read, as make and git's index do; a file modified
within `RACY_NS` of the record is hashed anyway (git's "racily clean" entries). Anything else restores the output from the build
cache (specbuild.cache.step_store) when it holds one of that key, else runs the step again. The engines are reused
only all together (one runtime call builds them all).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from functools import lru_cache
from pathlib import Path
from typing import Any

from specbuild.cache.provenance import MANIFEST, write_manifest
from specbuild.validate.report.terminal import print_result
from specbuild.validate.checks.base import CheckResult
from specbuild.validate.result import ValidationResult

FORMAT = 1
# recipe sections a step does not read (a change there leaves its output valid)
UNREAD = {"engines": ("validation", "triton", "deploy"), "repository": ("validation",), "validate": ()}
# versions an engine does not depend on: the release a deployment bundle targets
UNREAD_VERSIONS = ("tensorrt_llm_target",)
# A file modified this close to (or after) its stats were taken may change again within one timestamp tick
# unseen: it is hashed (coarse file systems tick in seconds).
RACY_NS = 2_000_000_000


def digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()


@lru_cache(maxsize=1)
def code_identity() -> str:
    """The SHA-256 of specbuild's own files (a source checkout changes without a new version)."""
    root = Path(__file__).resolve().parents[1]  # the specbuild package
    h = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            h.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def recipe_inputs(recipe, step: str) -> dict[str, Any]:
    data = recipe.model_dump(mode="json")
    for section in UNREAD[step]:
        data.pop(section, None)
    return data


def step_key(step: str, **inputs: Any) -> str:
    return digest({"format": FORMAT, "step": step, "code": code_identity(), **inputs})


def engines_key(recipe, manifest: dict[str, Any], steps: list, options: dict[str, Any]) -> str:
    """What the engines are built from (`steps`: the plan's engine steps; `options`: written_with)."""
    versions = {k: v for k, v in manifest["versions"].items() if k not in UNREAD_VERSIONS}
    return step_key(
        "engines",
        recipe=recipe_inputs(recipe, "engines"),
        checkpoints=manifest["checkpoints"],
        versions=versions,
        steps=[step.to_dict() for step in steps],
        options=options,
    )


def engine_key(stage_key: str, role: str) -> str:
    """One engine folder's key: its stage's key and its role."""
    return digest({"engines": stage_key, "role": role})


def repository_key(recipe, manifest: dict[str, Any], role: str, layout, options: dict[str, Any]) -> str:
    """What a repository is written from (`manifest`: the build's provenance, specbuild.cache.provenance; `options`:
    the command-line options that change what is written)."""
    return step_key(
        "repository",
        recipe=recipe_inputs(recipe, "repository"),
        checkpoints=manifest["checkpoints"],
        versions=manifest["versions"],
        role=role,
        options=options,
        folders={"engines": str(layout.engine(role)), "repository": str(layout.repository(role))},
    )


def validation_key(recipe, repository_keys: dict[str, str], server: dict[str, Any]) -> str:
    return step_key("validate", recipe=recipe_inputs(recipe, "validate"), repositories=repository_keys, server=server)


def not_content(rel: str) -> bool:
    """Not part of an output's content: its provenance.json, and the bytecode Python writes beside a model.py
    when tritonserver loads it."""
    return rel == MANIFEST or "__pycache__" in rel.split("/") or rel.endswith(".pyc")


def _content_files(folder: Path) -> list[tuple[str, Path]]:
    return [
        (path.relative_to(folder).as_posix(), path)
        for path in sorted(Path(folder).rglob("*"))
        if not not_content(path.relative_to(folder).as_posix()) and (path.is_symlink() or path.is_file())
    ]


def content_digest(folder: Path) -> str:
    """The SHA-256 of every file below `folder` (paths and bytes) but its provenance.json and bytecode."""
    h = hashlib.sha256()
    for rel, path in _content_files(folder):
        if path.is_symlink():
            h.update(rel.encode() + b"\0->" + str(path.readlink()).encode() + b"\0")
        else:
            h.update(rel.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def _stats(folder: Path) -> tuple[str, int]:
    """The SHA-256 of the content files' paths, sizes and modification times, and the newest of those times."""
    h, newest = hashlib.sha256(), 0
    for rel, path in _content_files(folder):
        st = os.lstat(path)
        h.update(f"{rel}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
        newest = max(newest, st.st_mtime_ns)
    return h.hexdigest(), newest


def step_record(key: str, folder: Path, content: str | None = None) -> dict[str, Any]:
    """The `step` entry of an output's provenance.json, once the output is complete (`content`: its digest when
    already known, e.g. an output restored from the build cache)."""
    taken = time.time_ns()
    return {
        "key": key,
        "content": content or content_digest(folder),
        "stats": _stats(folder)[0],
        "stats_taken_ns": taken,
    }


def reusable(folder: Path, key: str) -> bool:
    """The output at `folder` was made from inputs with this key and is whole as it was written: its files' stats
    as recorded (none modified within RACY_NS of the record), else their bytes (and then the record's stats are
    brought up to date, so the next check reads none)."""
    manifest = Path(folder) / MANIFEST
    try:
        written = json.loads(manifest.read_text())
        recorded = written.get("step") or {}
    except (OSError, ValueError):
        return False
    if recorded.get("key") != key:
        return False
    taken = time.time_ns()
    stats, newest = _stats(folder)
    if stats == recorded.get("stats") and newest < recorded.get("stats_taken_ns", 0) - RACY_NS:
        return True
    if recorded.get("content") != content_digest(folder):
        return False
    if newest < taken - RACY_NS:
        try:
            write_manifest(folder, {**written, "step": {**recorded, "stats": stats, "stats_taken_ns": taken}})
        except OSError:
            pass  # a read-only output is still reusable; its next check hashes it again
    return True


def passed_before(report: Path, key: str) -> bool:
    """A report made from these inputs is in place, whole, and passed (a failed verdict is never reused: the
    suite runs again, as a build tool reruns a failed test)."""
    if not reusable(report, key):
        return False
    try:
        return json.loads((Path(report) / "report.json").read_text()).get("passed") is True
    except (OSError, ValueError):
        return False


def reused_validation(report: Path):
    """The ValidationResult a report folder's report.json records (for a verdict that is reused: the tables and
    the exit code come from it)."""
    data = json.loads((Path(report) / "report.json").read_text())
    fields = ("name", "title", "status", "summary", "details", "gate", "duration_s", "inconclusive_allowed")
    checks = [CheckResult(**{k: c[k] for k in fields if k in c}) for c in data["checks"]]
    return ValidationResult(
        data["recipe"],
        data["method"],
        data["runtime"],
        None,
        None,
        data["serving_model"],
        checks,
        data["started"],
        data["duration_s"],
        data["prompts"],
        report_files=[Path(report) / "report.json"],
        gates=data.get("gates") or {},
        reused=True,
    )


def reuse_verdict(report: Path, stages, console, restored_from: Path | None = None) -> int:
    """compile's serve-and-validate step, reused (in place, or `restored_from` the build cache): says so, prints
    the tables report.json records; the exit code."""
    where = f"restored from the build cache {restored_from}: " if restored_from is not None else ""
    stages.reused(
        f"serve and validate ({report})",
        f"{where}the passing verdict of the same repositories and recipe; --revalidate runs them again",
    )
    stages.validation = result = reused_validation(report)
    print_result(result, console)
    console.print(f"report: {report}", soft_wrap=True)
    return 0 if result.passed else 1


def written_with(options, runtime) -> dict[str, Any]:
    """What changes what a repository holds besides the recipe: compile's options (CompileOptions) and the runtime's
    environment (Runtime.written_from)."""
    return {"trtllm_examples": options.trtllm_examples, **runtime.written_from()}


def served_with(options) -> dict[str, Any]:
    """What serves the repositories the suite measures (CompileOptions)."""
    from importlib import metadata

    try:
        pytriton = metadata.version("nvidia-pytriton")
    except metadata.PackageNotFoundError:
        pytriton = None
    against = options.against  # a verdict judged against another report is another verdict
    return {
        "tritonserver": str(options.tritonserver) if options.tritonserver else None,
        "nvidia-pytriton": pytriton,
        "decode_cpus": options.decode_cpus,
        "against": None if against is None else hashlib.sha256(Path(against).read_bytes()).hexdigest(),
    }
