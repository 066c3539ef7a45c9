"""The tiny model zoo: real-format checkpoints (target, draft, Medusa heads, EAGLE-1 and EAGLE-3 heads) trained on the CPU.

    python -m specbuild.zoo build --profile tiny --out checkpoints/tiny
    python -m specbuild.zoo add-stage eagle3 --zoo checkpoints/tiny --precision float32
    python -m specbuild.zoo build --profile base --out checkpoints/base
    python -m specbuild.zoo build --profile small --out .cache/zoo/small
    python -m specbuild.zoo verify checkpoints/tiny

From code: `ensure_profile("small") -> Path` returns a verified folder, building it on demand into the
git-ignored cache `.cache/zoo/<profile>` (or `$SPECBUILD_ZOO_CACHE/<profile>`). Light at import: torch
and transformers load only when a build runs.
"""

from __future__ import annotations

import os
from pathlib import Path

from specbuild.zoo import manifest
from specbuild.zoo.profiles import get_profile

REPO_ROOT = Path(__file__).resolve().parents[3]
COMMITTED = {name: REPO_ROOT / "checkpoints" / name for name in ("tiny", "base")}


def cache_root() -> Path:
    return Path(os.environ.get("SPECBUILD_ZOO_CACHE") or REPO_ROOT / ".cache" / "zoo")


def profile_folder_problems(folder: Path, profile_name: str) -> list[str]:
    """Why `folder` is not a complete, current build of `profile_name` ([] when it is)."""
    from specbuild.zoo.build import BUILDER_VERSION, STAGE_VERSIONS

    recorded = manifest.read(folder)
    if recorded is None:
        return [f"{folder}: no readable manifest.json"]
    problems = []
    if recorded.get("profile") != profile_name:
        problems.append(f"profile is {recorded.get('profile')!r}, not {profile_name!r}")
    if recorded.get("builder_version") != BUILDER_VERSION:
        problems.append(f"builder_version {recorded.get('builder_version')} != {BUILDER_VERSION}")
    if recorded.get("stage_versions") != STAGE_VERSIONS:
        problems.append(f"stage_versions {recorded.get('stage_versions')} != {STAGE_VERSIONS}")
    if recorded.get("profile_config") != get_profile(profile_name).as_dict():
        problems.append("profile settings changed since this folder was built")
    return problems + manifest.mismatches(folder, recorded)


def ensure_profile(name: str, progress=None, rebuild: bool = False) -> Path:
    """A verified folder for profile `name`, built on demand (minutes) and cached.

    `tiny` and `base` resolve to the committed `checkpoints/<name>` when that folder matches its manifest (a
    committed folder is never rebuilt here: its manifest may record another machine's versions).
    Every other profile lives in the cache and is rebuilt when its manifest does not match the
    current profile settings, builder version or file hashes.
    """
    from specbuild.zoo.build import build

    profile = get_profile(name)
    committed = COMMITTED.get(name)
    if committed is not None and not rebuild and committed.is_dir():
        recorded = manifest.read(committed)
        if recorded is not None and not manifest.mismatches(committed, recorded):
            return committed
    folder = cache_root() / name
    if not rebuild and folder.is_dir() and not profile_folder_problems(folder, name):
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    return build(profile, folder, progress)
