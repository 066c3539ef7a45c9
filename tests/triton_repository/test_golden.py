"""Golden GPU repositories, one per method (recipes/tensorrt-llm/*.yaml), checked in under tests/golden/repositories.

Configs and launch_triton.sh are compared as text with machine paths replaced (<ROOT> = the checkout,
<OUT> = the output folder); the other files (our model.py sources) by sha256 in MANIFEST.sha256.
Regenerate after an intended change with:  SPECBUILD_UPDATE_GOLDEN=1 pytest tests/triton_repository/test_golden.py
"""

from __future__ import annotations

import difflib
import hashlib
import os
import shutil

import pytest
from repo_helpers import (
    GPU_LLMAPI_RECIPES,
    GPU_RECIPES,
    ROOT,
    recipe_from,
    write_engine_configs,
    write_llmapi_repository,
)

from specbuild.repository.engine.writer import write_repository
from specbuild.methods import describe
from specbuild.runtimes import runtime_for

GOLDEN = ROOT / "tests" / "golden" / "repositories"
TEXT_FILES = ("config.pbtxt", "launch_triton.sh", "model.yaml")
UPDATE = os.environ.get("SPECBUILD_UPDATE_GOLDEN") == "1"


def snapshot(repo, out_root) -> dict[str, str]:
    """relative path -> text: configs and the launch script verbatim (paths made machine-independent), plus
    MANIFEST.sha256 with the hash of every other file."""
    files, manifest = {}, []
    for path in sorted(p for p in repo.rglob("*") if p.is_file()):
        rel = path.relative_to(repo).as_posix()
        if path.name in TEXT_FILES:
            text = path.read_text().replace(str(out_root), "<OUT>").replace(str(ROOT), "<ROOT>")
            files[rel] = text
        else:
            manifest.append(f"{hashlib.sha256(path.read_bytes()).hexdigest()}  {rel}")
    files["MANIFEST.sha256"] = "\n".join(manifest) + "\n"
    return files


def read_golden(folder) -> dict[str, str]:
    return {p.relative_to(folder).as_posix(): p.read_text() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("path", GPU_RECIPES + GPU_LLMAPI_RECIPES, ids=lambda p: p.stem)
def test_golden_repository(path, tmp_path, layout_for):
    recipe = recipe_from(path)
    layout = layout_for(recipe)
    if path in GPU_LLMAPI_RECIPES:
        got = snapshot(write_llmapi_repository(recipe, layout), tmp_path)
    else:
        write_engine_configs(recipe, layout)
        got = snapshot(write_repository(recipe, describe(recipe), layout, flavour=runtime_for(recipe)), tmp_path)
    folder = GOLDEN / path.stem
    if UPDATE:
        shutil.rmtree(folder, ignore_errors=True)
        for rel, text in got.items():
            (folder / rel).parent.mkdir(parents=True, exist_ok=True)
            (folder / rel).write_text(text)
        return
    assert folder.is_dir(), f"no golden repository {folder}; create it with SPECBUILD_UPDATE_GOLDEN=1"
    want = read_golden(folder)
    assert sorted(got) == sorted(want), "the repository's files differ from the golden ones"
    for rel in want:
        if got[rel] != want[rel]:
            diff = "".join(
                difflib.unified_diff(
                    want[rel].splitlines(True), got[rel].splitlines(True), f"golden/{rel}", f"written/{rel}"
                )
            )
            pytest.fail(
                f"{path.stem}: {rel} differs from the golden file "
                f"(SPECBUILD_UPDATE_GOLDEN=1 if intended):\n{diff[:4000]}"
            )


def test_every_method_has_a_golden_repository():
    from specbuild.methods import METHODS

    methods = {recipe_from(p).speculation.method for p in GPU_RECIPES + GPU_LLMAPI_RECIPES}
    assert methods == set(METHODS)
    if not UPDATE:
        assert {p.stem for p in GPU_RECIPES + GPU_LLMAPI_RECIPES} <= {p.name for p in GOLDEN.iterdir()}
