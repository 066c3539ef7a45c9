"""Checkpoints named by Hugging Face model id, resolved through the local hub cache.

A recipe's checkpoint field (`model.checkpoint`, `model.tokenizer`, `speculation.checkpoint`) is a folder, or a
model id `org/name` with an optional revision after `@` (a branch, tag or commit hash:
`meta-llama/Llama-3.1-8B-Instruct@main`). A folder that exists wins over a model id of the same spelling.

Model ids resolve offline, in the hub cache huggingface_hub uses (`HF_HUB_CACHE`, else `HF_HOME/hub`, else
`~/.cache/huggingface/hub`; huggingface_hub `constants.py`), laid out as
`models--<org>--<name>/{refs/<branch or tag>, snapshots/<commit>/, blobs/}` (huggingface_hub `file_download.py`;
the files of a snapshot are relative symlinks into `blobs/`). Nothing is downloaded unless asked:
`specbuild download RECIPE` (huggingface_hub `snapshot_download`).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from specbuild.errors import UserError

# huggingface_hub validate_repo_id: letters, digits, '-', '_', '.'; "org/name"; no '--' or '..'
_PART = r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}"
_MODEL_ID = re.compile(rf"^(?P<repo>{_PART}/{_PART})(?:@(?P<revision>[A-Za-z0-9][A-Za-z0-9._/-]{{0,127}}))?$")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")
DEFAULT_REVISION = "main"


@dataclass(frozen=True)
class ModelId:
    repo_id: str  # "meta-llama/Llama-3.1-8B-Instruct"
    revision: str | None  # as written after '@' (None: main)

    def __str__(self) -> str:
        return self.repo_id + (f"@{self.revision}" if self.revision else "")

    @property
    def folder_name(self) -> str:
        """The cache folder of the repository (huggingface_hub repo_folder_name)."""
        return "models--" + self.repo_id.replace("/", "--")


@dataclass(frozen=True)
class Checkpoint:
    """Where a checkpoint field points: the folder to read, and for a model id what it resolved to."""

    written: str  # the recipe's value
    path: Path  # the folder to read (a snapshot folder for a model id); may not exist when `problem` is set
    model_id: ModelId | None = None
    commit: str | None = None  # the snapshot's commit hash (model ids)
    problem: str | None = None  # why it cannot be used (a model id not in the cache, a hub repository root)

    def describe(self) -> dict:
        """What a plan records about it."""
        out = {"checkpoint": self.written, "path": str(self.path)}
        if self.model_id is not None:
            out.update(
                model_id=self.model_id.repo_id, revision=self.model_id.revision or DEFAULT_REVISION, commit=self.commit
            )
        return out


def parse_model_id(value: str) -> ModelId | None:
    """The model id `value` spells, or None when it cannot be one (an absolute path, ./x, ~/x, a/b/c)."""
    text = str(value)
    if text.startswith(("/", ".", "~")) or "--" in text.split("@", 1)[0] or ".." in text:
        return None
    match = _MODEL_ID.match(text)
    return ModelId(match["repo"], match["revision"]) if match else None


def cache_dir() -> Path:
    """The hub cache huggingface_hub reads (its constants: HF_HUB_CACHE, HF_HOME/hub, ~/.cache/huggingface/hub)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    home = os.environ.get("HF_HOME") or os.path.join(os.environ.get("XDG_CACHE_HOME", "~/.cache"), "huggingface")
    return Path(home).expanduser() / "hub"


def _commit_of(repo: Path, revision: str) -> str | None:
    """The commit a revision names in a cached repository: refs/<revision> holds it; a commit hash names
    itself when its snapshot is there."""
    if _COMMIT.match(revision) and (repo / "snapshots" / revision).is_dir():
        return revision
    ref = repo / "refs" / revision
    try:
        commit = ref.read_text().strip() if ref.is_file() else None
    except OSError:
        return None
    return commit if commit and _COMMIT.match(commit) else None


def how_to_fetch(model: ModelId) -> str:
    revision = f" --revision {model.revision}" if model.revision else ""
    return (
        f"fetch it with `specbuild download RECIPE` or `hf download {model.repo_id}{revision}` (set HF_HUB_CACHE "
        "or HF_HOME if the model is cached elsewhere), or give the checkpoint's folder instead"
    )


def resolve(value, base_dir: Path) -> Checkpoint:
    """The folder a checkpoint field names: a path (relative to the recipe's folder) that exists, else a model id
    in the hub cache, else the path as written (whose absence `check` reports)."""
    written = str(value)
    folder = Path(written).expanduser()
    folder = folder if folder.is_absolute() else (Path(base_dir) / folder)
    try:
        if folder.exists():
            folder = folder.resolve()
            return Checkpoint(written, folder, problem=repository_root_problem(folder))
        if parse_model_id(written) is None:
            return Checkpoint(written, folder.resolve())
    except (OSError, RuntimeError) as e:  # a name too long, a symlink loop, a file in the middle of the path
        return Checkpoint(
            written,
            folder,
            problem=f"{written} cannot be used as a path ({getattr(e, 'strerror', None) or e}) — fix the path",
        )
    model = parse_model_id(written)
    cache = cache_dir()
    repo = cache / model.folder_name
    revision = model.revision or DEFAULT_REVISION
    commit = _commit_of(repo, revision)
    if commit is None:
        where = f"{repo} has no revision {revision}" if repo.is_dir() else f"it is not in the hub cache {cache}"
        return Checkpoint(
            written,
            repo / "snapshots" / revision,
            model,
            problem=f"{written} is not a folder (resolved to {folder}) and, as a Hugging Face model id, "
            f"{where} — {how_to_fetch(model)}",
        )
    snapshot = repo / "snapshots" / commit
    if not snapshot.is_dir():
        return Checkpoint(
            written,
            snapshot,
            model,
            commit,
            problem=f"{written}: refs/{revision} of {repo} names commit {commit}, whose snapshot is not there "
            f"(an interrupted download) — {how_to_fetch(model)}",
        )
    return Checkpoint(written, snapshot, model, commit)


def repository_root_problem(folder: Path) -> str | None:
    """A hub-cache repository root (`models--org--name/`, which holds refs/ and snapshots/, not the files) is
    answered with the snapshot to use."""
    folder = Path(folder)
    if not (folder / "snapshots").is_dir() or (folder / "config.json").exists():
        return None
    snapshots = sorted(p.name for p in (folder / "snapshots").iterdir() if p.is_dir())
    main = _commit_of(folder, DEFAULT_REVISION)
    pick = main if main in snapshots else (snapshots[-1] if len(snapshots) == 1 else None)
    repo_id = folder.name[len("models--") :].replace("--", "/", 1) if folder.name.startswith("models--") else None
    use = (
        f"point it at {folder / 'snapshots' / pick}"
        if pick
        else f"point it at one of {folder / 'snapshots'}/{{{', '.join(snapshots) or 'no snapshot yet'}}}"
    )
    also = f", or give the model id {repo_id}" + (f"@{pick}" if pick and not main else "") if repo_id else ""
    return f"{folder} is a Hugging Face hub-cache repository (refs/, snapshots/), not a checkpoint folder — {use}{also}"


def download(model: ModelId) -> Path:
    """Fetch a model into the hub cache (huggingface_hub snapshot_download): only when the user asks."""
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise UserError(f"downloading {model} needs huggingface_hub — pip install 'specbuild[reference]'") from None
    try:
        return Path(snapshot_download(model.repo_id, revision=model.revision, cache_dir=cache_dir()))
    except Exception as e:  # noqa: BLE001 - huggingface_hub raises many types (offline, gated, not found)
        raise UserError(
            f"could not download {model}: {str(e).splitlines()[0][:300]} — check the id, your network "
            "and your Hugging Face token (hf auth login) for gated models"
        ) from None


def checkpoint_fields(recipe) -> list[tuple[str, Path | str]]:
    """(field, value) of every checkpoint field a recipe sets."""
    out = [("model.checkpoint", recipe.model.checkpoint)]
    if recipe.model.tokenizer is not None:
        out.append(("model.tokenizer", recipe.model.tokenizer))
    if getattr(recipe.speculation, "checkpoint", None) is not None:
        out.append(("speculation.checkpoint", recipe.speculation.checkpoint))
    return out


def fetch_recipe_models(recipe):
    """Download the model ids a (loaded) recipe names that the hub cache lacks; yields one line per field."""
    for field, value in checkpoint_fields(recipe):
        found = recipe.checkpoint(value)
        if found.model_id is None:
            yield f"{field}: {value} is a folder — nothing to download"
        elif found.problem is None:
            yield f"{field}: {found.model_id} is in the hub cache ({found.path})"
        else:
            yield f"{field}: {found.model_id} downloaded to {download(found.model_id)}"
