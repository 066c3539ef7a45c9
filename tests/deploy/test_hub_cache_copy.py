"""A checkpoint that is a Hugging Face hub-cache snapshot reaches the deployment's storage as real files.

The hub cache's layout (huggingface_hub's cache: `models--<org>--<name>/refs/main` holding the commit,
`snapshots/<commit>/<file>` a relative symlink into `../../blobs/<etag>`, nested files one `../` deeper) is built
here with the tiny zoo's files as the blobs. The recipe names the snapshot folder (what the recipe resolves a model
id to). Then the copy steps the bundle writes are replayed as a reader runs them: README.md's storage block (the
claim, through the loader pod: kubectl is a stand-in that runs the pod's `sh -c` locally into a folder standing
for the claim) and `copy-models.sh DEST` (the Slurm models folder). The destination must hold no symlink and every
file's bytes must be the blob's. A snapshot with a link to nothing stops the copy before the destination is
touched.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import pytest
from deploy_helpers import ROOT, compile_layout, make_recipe
from script_helpers import Runner, bash_blocks

from specbuild.deploy.bundle import write_bundle
from specbuild.deploy.context import k8s_name
from specbuild.runtimes.build import resolve_build

TINY = ROOT / "checkpoints" / "tiny"


def hub_cache(root: Path, repo_id: str, files: dict[str, Path]) -> Path:
    """A hub-cache repository holding `files` (path in the repository -> source); returns its snapshot folder."""
    org, name = repo_id.split("/")
    repo = root / f"models--{org}--{name}"
    commit = hashlib.sha1(repo_id.encode()).hexdigest()
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    (repo / "blobs").mkdir()
    snapshot = repo / "snapshots" / commit
    for rel, source in files.items():
        data = source.read_bytes()
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        link = snapshot / rel
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))  # relative, as huggingface_hub writes them
    return snapshot


def snapshot_of(root: Path, repo_id: str, zoo: str) -> Path:
    files = {p.name: p for p in sorted((TINY / zoo).iterdir()) if p.is_file()}
    files["original/params.json"] = TINY / zoo / "config.json"  # a nested file: a link three levels up
    return hub_cache(root, repo_id, files)


def assert_real_copy(snapshot: Path, copied: Path) -> None:
    links = [p for p in copied.rglob("*") if p.is_symlink()]
    assert not links, links
    wanted = sorted(str(p.relative_to(snapshot)) for p in snapshot.rglob("*") if not p.is_dir())
    got = sorted(str(p.relative_to(copied)) for p in copied.rglob("*") if p.is_file())
    assert got == wanted
    for rel in wanted:
        assert (copied / rel).read_bytes() == (snapshot / rel).resolve().read_bytes(), rel


CASES = {
    # flavour: (recipe stem, what its snapshots are, their folders in the tree)
    "llm-api": (
        "llmapi_eagle3",
        {
            "model.checkpoint": ("meta-llama/Llama-3.1-8B-Instruct", "target", "model"),
            "speculation.checkpoint": ("yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "eagle3", "speculative-model"),
        },
    ),
    "engine": ("eagle", {"model.tokenizer": ("lmsys/vicuna-7b-v1.3", "target", "tokenizer")}),
}


@pytest.mark.parametrize("flavour", sorted(CASES))
def test_copy_steps_leave_no_symlink_in_the_storage(tmp_path, flavour):
    stem, snapshots = CASES[flavour]
    cache = tmp_path / "hub"
    made = {key: (snapshot_of(cache, repo_id, zoo), slug) for key, (repo_id, zoo, slug) in snapshots.items()}
    recipe = make_recipe(stem, {key: str(snapshot) for key, (snapshot, _) in made.items()})
    bundle = write_bundle(resolve_build(recipe), compile_layout(tmp_path / "out", recipe), validate=False)
    name = k8s_name(recipe)
    runner = Runner(tmp_path)

    # README.md's storage block, as a reader runs it in the bundle folder
    (storage,) = [b for b in bash_blocks((bundle / "README.md").read_text()) if "loader-pod.yaml" in b]
    run = runner.bash("-c", "set -e\n" + storage, cwd=bundle)
    assert run.returncode == 0, run.stderr
    # the Slurm models folder
    run = runner.bash(str(bundle / "copy-models.sh"), str(tmp_path / "models"))
    assert run.returncode == 0, run.stderr
    for root in (runner.claim, tmp_path / "models"):
        for snapshot, slug in made.values():
            assert_real_copy(snapshot, root / name / slug)
        assert (root / name / "repository" / "launch_triton.sh").is_file()
        assert not list(root.rglob("*.partial"))


def test_a_link_to_nothing_stops_the_copy(tmp_path):
    snapshot = snapshot_of(tmp_path / "hub", "meta-llama/Llama-3.1-8B-Instruct", "target")
    recipe = make_recipe("llmapi_eagle3", {"model.checkpoint": str(snapshot)})
    bundle = write_bundle(resolve_build(recipe), compile_layout(tmp_path / "out", recipe), validate=False)
    models = tmp_path / "models"
    runner = Runner(tmp_path)
    assert runner.bash(str(bundle / "copy-models.sh"), str(models)).returncode == 0
    before = {p: p.read_bytes() for p in models.rglob("*") if p.is_file()}
    blob = (snapshot / "tokenizer.json").resolve()
    blob.unlink()  # an interrupted download: the snapshot's link dangles
    run = runner.bash(str(bundle / "copy-models.sh"), str(models))
    assert run.returncode == 2 and "tokenizer.json links to nothing" in run.stderr, run.stderr
    assert {p: p.read_bytes() for p in models.rglob("*") if p.is_file()} == before  # the storage is untouched
    shutil.rmtree(tmp_path / "hub")
