"""provenance.json (specbuild.cache.provenance): what an output was made from, and what differs between two outputs."""

from __future__ import annotations

import hashlib
import json
import shutil
import struct
from pathlib import Path

import pytest

from specbuild.plan import Layout
from specbuild.planning import plan_build
from specbuild.cache.provenance import MANIFEST, diff_manifests, make_manifest, read_manifest, stamp
from specbuild.recipe import load_recipe
from specbuild.runtimes.build import resolve_build

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "checkpoints" / "tiny"


def _recipe(tmp_path: Path, *, max_tokens: int = 32, eagle: Path = TINY / "eagle") -> Path:
    text = (ROOT / "tests" / "recipes" / "demo_tiny.yaml").read_text()
    text = text.replace("../../checkpoints/tiny/target", str(TINY / "target"))
    text = text.replace("../../checkpoints/tiny/eagle", str(eagle)).replace(
        "max_tokens: 32", f"max_tokens: {max_tokens}"
    )
    path = tmp_path / f"r{max_tokens}-{eagle.name}.yaml"
    path.write_text(text)
    return path


def _manifest(path: Path, tmp_path: Path) -> dict:
    recipe = load_recipe(path)
    layout = Layout(tmp_path / "e", tmp_path / "r", tmp_path / "rep", recipe.name)
    return make_manifest(recipe, "engine", tmp_path / "e", plan=plan_build(resolve_build(recipe), layout).to_dict())


def test_a_manifest_records_the_recipe_checkpoints_versions_and_plan(tmp_path):
    path = _recipe(tmp_path)
    m = _manifest(path, tmp_path)
    assert m["recipe"]["text"] == path.read_text()
    assert m["recipe"]["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    files = m["checkpoints"]["model.checkpoint"]["files"]
    weights = TINY / "target" / "model.safetensors"
    with weights.open("rb") as f:  # the safetensors header, read independently of specbuild
        (length,) = struct.unpack("<Q", f.read(8))
        header = f.read(length)
    assert files["model.safetensors"]["hashed"] == "safetensors-header"
    assert files["model.safetensors"]["sha256"] == hashlib.sha256(header).hexdigest()
    assert files["model.safetensors"]["size"] == weights.stat().st_size
    assert files["config.json"]["sha256"] == hashlib.sha256((TINY / "target" / "config.json").read_bytes()).hexdigest()
    assert set(m["checkpoints"]) == {"model.checkpoint", "speculation.checkpoint"}
    versions = m["versions"]
    assert versions["specbuild"] and versions["torch"] and versions["tensorrt_llm"] is None
    assert [s["kind"] for s in m["plan"]["steps"]][:2] == ["reference-engine", "reference-engine"]


def test_the_same_inputs_make_no_difference(tmp_path):
    path = _recipe(tmp_path)
    a, b = _manifest(path, tmp_path), _manifest(path, tmp_path)
    b["created"] = "another time"
    assert diff_manifests(a, b) == []


def test_differences_are_named(tmp_path):
    a = _manifest(_recipe(tmp_path), tmp_path)
    b = _manifest(_recipe(tmp_path, max_tokens=16), tmp_path)
    b["versions"]["torch"] = "9.9.9"
    ra, rb = a["recipe"], b["recipe"]
    assert diff_manifests(a, b) == [
        f"recipe.path: {ra['path']} -> {rb['path']}",
        f"recipe.sha256: {ra['sha256']} -> {rb['sha256']}",
        f"recipe.content_sha256: {ra['content_sha256']} -> {rb['content_sha256']}",
        f"versions.torch: {a['versions']['torch']} -> 9.9.9",
        f"plan.recipe: {ra['path']} -> {rb['path']}",
        "plan.steps.5.details.max_tokens: 32 -> 16",
        "recipe.text: -  max_tokens: 32",
        "recipe.text: +  max_tokens: 16",
    ]


def test_a_changed_checkpoint_file_is_named(tmp_path):
    eagle = tmp_path / "eagle"
    shutil.copytree(TINY / "eagle", eagle)
    a = _manifest(_recipe(tmp_path, eagle=eagle), tmp_path)
    config = json.loads((eagle / "config.json").read_text())
    config["note"] = "retrained"
    (eagle / "config.json").write_text(json.dumps(config))
    b = _manifest(_recipe(tmp_path, eagle=eagle), tmp_path)
    changed = {line.split(":")[0] for line in diff_manifests(a, b)}
    assert "checkpoints.speculation.checkpoint.files.config.json.sha256" in changed
    assert "checkpoints.speculation.checkpoint.files.config.json.size" in changed
    assert not any(c.startswith("checkpoints.model") or c.startswith("recipe") for c in changed)


def test_stamp_writes_the_file_whole_and_only_into_a_folder(tmp_path):
    m = _manifest(_recipe(tmp_path), tmp_path)
    assert stamp(tmp_path / "missing", m, "report") is None
    folder = tmp_path / "out"
    folder.mkdir()
    written = stamp(folder, m, "repository")
    assert written == folder / MANIFEST and [p.name for p in folder.iterdir()] == [MANIFEST]  # no partial left
    back = read_manifest(folder)
    assert back["kind"] == "repository" and back["output"] == str(folder)
    assert diff_manifests(m, back) == []
    grown = {**back, "versions": {**back["versions"], "tensorrt_llm": "1.2.1", "onnx": "1.17"}}
    del grown["versions"]["torch"]
    assert diff_manifests(back, grown) == [
        "versions.torch: removed (was " + back["versions"]["torch"] + ")",
        "versions.tensorrt_llm: null -> 1.2.1",
        "versions.onnx: added (1.17)",
    ]


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    from specbuild.cli import main

    tmp = tmp_path_factory.mktemp("prov")
    code = main(
        [
            "compile",
            str(ROOT / "tests" / "recipes" / "demo_tiny.yaml"),
            "--no-validate",
            "--engines-dir",
            str(tmp / "e"),
            "--repo-dir",
            str(tmp / "r"),
            "--report-dir",
            str(tmp / "rep"),
        ]
    )
    assert code == 0
    return tmp


def test_compile_stamps_every_engine_folder_and_repository(compiled):
    folders = {
        "engine": [compiled / "e" / "demo-tiny" / role for role in ("target", "baseline")],
        "repository": [compiled / "r" / "demo-tiny", compiled / "r" / "demo-tiny-baseline"],
    }
    manifests = []
    for kind, paths in folders.items():
        for folder in paths:
            m = read_manifest(folder)
            assert m["kind"] == kind and Path(m["output"]) == folder
            manifests.append(m)
    assert all(diff_manifests(manifests[0], m) == [] for m in manifests)  # one build, one record
    assert manifests[0]["recipe"]["path"] == str((ROOT / "tests" / "recipes" / "demo_tiny.yaml").resolve())


def test_validate_report_stamps_the_report_folder(tmp_path, monkeypatch):
    """`validate --report DIR`: the suite (a stand-in here: tests/validate runs the real one) writes DIR, then the
    manifest joins it."""
    import specbuild.validate as validate
    import specbuild.validate.report.terminal as terminal
    from specbuild.cli import main

    class Result:
        passed, failures = True, []

    def suite(recipe, target, baseline, *, report_dir, **kw):
        Path(report_dir).mkdir(parents=True)
        result = Result()
        result.report_files = [Path(report_dir) / "report.json"]
        return result

    monkeypatch.setattr(validate, "run_validation", suite)
    monkeypatch.setattr(terminal, "print_result", lambda result, console: None)
    report = tmp_path / "report"
    recipe = _recipe(tmp_path)
    assert (
        main(["validate", str(recipe), "--url", "127.0.0.1:8000", "--checks", "health", "--report", str(report)]) == 0
    )
    m = read_manifest(report)
    assert m["kind"] == "report" and m["recipe"]["text"] == recipe.read_text() and m["plan"] is None
