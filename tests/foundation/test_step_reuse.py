"""Reusing a step's output made from the same inputs (specbuild.cache.step_cache): what each step's key reads, when an
output in place may be reused, and `compile` reusing engines, repositories and a passing verdict (and saying so),
in place or restored from the build cache (specbuild.cache.step_store)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from specbuild.plan import Layout
from specbuild.planning import plan_build
from specbuild.cache.provenance import MANIFEST, make_manifest, stamp
from specbuild.recipe import load_recipe
from specbuild.cache.step_cache import engines_key, passed_before, repository_key, reusable, step_record, validation_key
from specbuild.runtimes.build import resolve_build

ROOT = Path(__file__).resolve().parents[2]
DEMO_TINY = ROOT / "tests" / "recipes" / "demo_tiny.yaml"
OPTIONS = {"trtllm_examples": None, "llmapi_model_dir": None}
SERVER = {"tritonserver": None, "nvidia-pytriton": "0.7.0", "decode_cpus": "off"}


def _recipe_file(folder: Path, *replacements: tuple[str, str], name: str = "r.yaml") -> Path:
    text = DEMO_TINY.read_text().replace("../../checkpoints", str(ROOT / "checkpoints"))
    for old, new in replacements:
        assert old in text, old
        text = text.replace(old, new)
    path = folder / name
    path.write_text(text)
    return path


def _keys(path: Path, tmp_path: Path) -> tuple[str, dict[str, str], str]:
    recipe = load_recipe(path)
    layout = Layout(tmp_path / "e", tmp_path / "r", tmp_path / "rep", recipe.name)
    manifest = make_manifest(recipe, "", Path())
    engines = engines_key(recipe, manifest, plan_build(resolve_build(recipe), layout).engine_steps, OPTIONS)
    repos = {
        role: repository_key(recipe, manifest, role, layout, {**OPTIONS, "engines": engines})
        for role in ("target", "baseline")
    }
    return engines, repos, validation_key(recipe, repos, SERVER)


@pytest.mark.parametrize(
    "change, engines_change, repository_changes",
    [
        (("max_tokens: 32", "max_tokens: 16"), False, False),  # validation.*: only the verdict
        (("streaming: true", "streaming: false"), False, True),  # triton.*: the repositories (and so the verdict)
        (("max_batch_size: 8", "max_batch_size: 4"), True, True),  # build.*: the engines, and all after them
    ],
)
def test_what_a_change_invalidates(tmp_path, change, engines_change, repository_changes):
    before = _keys(_recipe_file(tmp_path), tmp_path)
    assert _keys(_recipe_file(tmp_path), tmp_path) == before  # the same inputs, the same keys
    engines, repos, verdict = _keys(_recipe_file(tmp_path, change, name="changed.yaml"), tmp_path)
    assert (engines != before[0]) is engines_change
    assert (repos != before[1]) is repository_changes and verdict != before[2]


def test_a_changed_checkpoint_file_or_server_changes_the_keys(tmp_path):
    recipe_path = _recipe_file(tmp_path)
    engines, repos, verdict = _keys(recipe_path, tmp_path)
    recipe = load_recipe(recipe_path)
    assert validation_key(recipe, repos, {**SERVER, "tritonserver": "/opt/tritonserver/bin/tritonserver"}) != verdict
    manifest = make_manifest(recipe, "", Path())
    layout = Layout(tmp_path / "e", tmp_path / "r", tmp_path / "rep", recipe.name)
    manifest["checkpoints"]["model.checkpoint"]["files"]["config.json"]["mtime"] = "another time"
    assert repository_key(recipe, manifest, "target", layout, {**OPTIONS, "engines": engines}) != repos["target"]
    assert engines_key(recipe, manifest, plan_build(resolve_build(recipe), layout).engine_steps, OPTIONS) != engines
    # the release a deployment bundle targets is no input of an engine built here
    manifest = make_manifest(recipe, "", Path())
    manifest["versions"]["tensorrt_llm_target"] = "another release"
    assert engines_key(recipe, manifest, plan_build(resolve_build(recipe), layout).engine_steps, OPTIONS) == engines


def test_an_output_is_reused_only_whole_and_made_from_the_same_key(tmp_path):
    folder = tmp_path / "repo"
    (folder / "m" / "1").mkdir(parents=True)
    (folder / "m" / "config.pbtxt").write_text("name: 'm'\n")
    (folder / "m" / "1" / "model.py").write_text("x = 1\n")
    assert not reusable(folder, "k")  # no manifest
    stamp(folder, {"step": step_record("k", folder)}, "repository")
    assert reusable(folder, "k") and not reusable(folder, "other")
    (folder / "m" / "1" / "__pycache__").mkdir()  # tritonserver loaded model.py: bytecode beside it
    (folder / "m" / "1" / "__pycache__" / "model.cpython-311.pyc").write_bytes(b"\0")
    assert reusable(folder, "k")
    (folder / "m" / "config.pbtxt").write_text("name: 'm'\nmax_batch_size: 2\n")  # edited in place
    assert not reusable(folder, "k")
    (folder / "m" / "config.pbtxt").write_text("name: 'm'\n")
    (folder / "m" / "1" / "model.py").unlink()  # half there
    assert not reusable(folder, "k")
    (folder / MANIFEST).write_text("{")  # a torn manifest
    assert not reusable(folder, "k")


def test_only_a_passing_verdict_is_reused(tmp_path):
    report = tmp_path / "report"
    report.mkdir()
    for passed in (True, False):
        (report / "report.json").write_text(json.dumps({"passed": passed}))
        stamp(report, {"step": step_record("k", report)}, "report")
        assert passed_before(report, "k") is passed


def _compile(recipe: Path, tmp: Path, *args: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "FORCE_COLOR")}
    env["PYTHONPATH"] = str(ROOT / "pipeline")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "specbuild.cli",
            "compile",
            str(recipe),
            "--json",
            "--engines-dir",
            str(tmp / "e"),
            "--repo-dir",
            str(tmp / "r"),
            "--report-dir",
            str(tmp / "rep"),
            *args,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        timeout=600,
    )
    doc = json.loads(done.stdout)
    assert done.returncode == doc["exit_code"], done.stderr[-3000:]
    doc["stderr"] = done.stderr
    doc["said"] = " ".join(done.stderr.split())  # its lines joined: a long one wraps at the log's width
    return doc


def _statuses(doc: dict) -> dict[str, str]:
    return {
        s["name"].split(" ")[0] + (" baseline" if s["name"].endswith("-baseline") else ""): s["status"]
        for s in doc["steps"]
    }


def test_compile_reuses_unchanged_outputs_and_rebuilds_what_a_change_touches(tmp_path):
    recipe = _recipe_file(tmp_path)
    cache = ("--cache-dir", str(tmp_path / "cache"))
    first = _compile(recipe, tmp_path, "--no-validate", *cache)
    assert _statuses(first) == {"engines": "done", "repository": "done", "repository baseline": "done"}
    second = _compile(recipe, tmp_path, "--no-validate", *cache)
    assert _statuses(second) == {"engines": "reused", "repository": "reused", "repository baseline": "reused"}
    assert second["said"].count("reused (nothing it is made from changed)") == 3
    assert set(_statuses(_compile(recipe, tmp_path, "--no-validate", "--no-cache", *cache)).values()) == {"done"}
    _recipe_file(tmp_path, ("max_tokens: 32", "max_tokens: 16"))  # validation only: nothing to rebuild
    assert set(_statuses(_compile(recipe, tmp_path, "--no-validate", *cache)).values()) == {"reused"}
    _recipe_file(tmp_path, ("streaming: true", "streaming: false"))  # triton only: the repositories
    assert _statuses(_compile(recipe, tmp_path, "--no-validate", *cache)) == {
        "engines": "reused",
        "repository": "done",
        "repository baseline": "done",
    }
    _recipe_file(tmp_path, ("max_batch_size: 8", "max_batch_size: 4"))  # build: the engines and all after them
    assert set(_statuses(_compile(recipe, tmp_path, "--no-validate", *cache)).values()) == {"done"}
    config = json.loads((tmp_path / "e" / "demo-tiny" / "target" / "config.json").read_text())
    assert config["build_config"]["max_batch_size"] == 4

    # back to the first recipe: what its folders in place no longer hold comes back from the build cache
    _recipe_file(tmp_path)
    back = _compile(recipe, tmp_path, "--no-validate", *cache)
    assert set(_statuses(back).values()) == {"reused"}
    assert back["said"].count("restored from the build cache") == 3
    config = json.loads((tmp_path / "e" / "demo-tiny" / "target" / "config.json").read_text())
    assert config["build_config"]["max_batch_size"] == 8
    assert reusable(
        tmp_path / "e" / "demo-tiny" / "target",
        json.loads((tmp_path / "e" / "demo-tiny" / "target" / MANIFEST).read_text())["step"]["key"],
    )


def test_compile_reuses_a_passing_verdict_of_the_same_inputs(tmp_path):
    """Two compiles of one recipe (validated on one concurrency level to stay cheap): the second serves nothing
    and reuses the first's verdict, its tables printed from report.json."""
    recipe = _recipe_file(
        tmp_path, ("concurrency: [1, 2, 4, 8, 16]", "concurrency: [1]"), ("max_tokens: 32", "max_tokens: 8")
    )
    first = _compile(recipe, tmp_path)
    assert first["verdict"] == "passed", first["stderr"][-3000:]
    assert [s["status"] for s in first["steps"]] == ["done"] * 6  # engines, 2 repositories, 2 serves, validate
    second = _compile(recipe, tmp_path)
    assert second["verdict"] == "passed" and second["exit_code"] == 0
    assert [s["status"] for s in second["steps"]] == ["reused"] * 4  # engines, 2 repositories, the verdict
    assert "✓ serve" not in second["stderr"] and "--revalidate runs them again" in second["said"]
    started = second["validation"]["started"]  # the first run's, said to be so (not this run's duration)
    assert second["validation"]["reused"] and f"the verdict of an earlier run, started {started}" in second["said"]
    assert second["validation"]["checks"] == first["validation"]["checks"]
    report = json.loads((tmp_path / "rep" / "demo-tiny" / "report.json").read_text())
    squeezed = "".join(ch for ch in second["stderr"] if not ch.isspace() and ch not in "│┃")
    for check in report["checks"]:  # the reused tables, printed whole (a long summary folded in its cell)
        assert "".join(check["summary"].split()) in squeezed

    # a fresh checkout (no report in place) with the build cache kept: the verdict comes back from the cache
    shutil.rmtree(tmp_path / "rep")
    third = _compile(recipe, tmp_path)
    assert third["verdict"] == "passed" and [s["status"] for s in third["steps"]] == ["reused"] * 4
    assert "✓ serve" not in third["stderr"] and "restored from the build cache" in third["said"]
    assert json.loads((tmp_path / "rep" / "demo-tiny" / "report.json").read_text()) == report
    assert third["validation"]["checks"] == first["validation"]["checks"]


def _age(folder: Path, seconds: int) -> None:
    for path in folder.rglob("*"):
        st = path.stat()
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns - seconds * 1_000_000_000))


def test_an_unchanged_output_is_reused_without_reading_its_bytes(tmp_path, monkeypatch):
    """The reuse check of a big engine must not hash it every time: while the files' stats are as recorded it
    reads none (bounded work: content_digest calls), and an edit still counts."""
    import specbuild.cache.step_cache as step_cache

    folder = tmp_path / "engine"
    folder.mkdir()
    (folder / "rank0.engine").write_bytes(b"w" * 4096)
    (folder / "config.json").write_text("{}")
    stamp(folder, {"step": step_record("k", folder)}, "engine")
    hashed = []
    real = step_cache.content_digest
    monkeypatch.setattr(step_cache, "content_digest", lambda f: hashed.append(f) or real(f))

    assert reusable(folder, "k") and len(hashed) == 1  # just written: racily clean, so hashed
    _age(folder, 60)  # a minute later
    assert reusable(folder, "k") and len(hashed) == 2  # hashed once more, and its stats recorded
    assert reusable(folder, "k") and reusable(folder, "k") and len(hashed) == 2  # then no byte read
    (folder / "rank0.engine").write_bytes(b"x" * 4096)  # same size, new bytes
    assert not reusable(folder, "k") and len(hashed) == 3
    (folder / "rank0.engine").write_bytes(b"w" * 4096)
    (folder / "extra.bin").write_bytes(b"")  # a file more
    assert not reusable(folder, "k")


def test_the_llmapi_model_folder_named_by_the_machine_keys_only_the_runtime_that_reads_it(monkeypatch):
    # step_cache asks the runtime what in the environment changes its files (Runtime.written_from): the
    # tensorrt-llm llm-api runtime copies NVIDIA's model.py from $SPECBUILD_LLMAPI_MODEL_DIR; the others read no such
    # variable, so it must not invalidate their outputs
    from types import SimpleNamespace

    from specbuild.cache.step_cache import written_with
    from specbuild.runtimes import get_runtime

    options = SimpleNamespace(trtllm_examples=None)
    monkeypatch.delenv("SPECBUILD_LLMAPI_MODEL_DIR", raising=False)
    before = {
        (name, flavour): written_with(options, get_runtime(name, flavour))
        for name in ("reference", "tensorrt-llm")
        for flavour in ("engine", "llm-api")
    }
    monkeypatch.setenv("SPECBUILD_LLMAPI_MODEL_DIR", "/somewhere/tensorrt_llm/1")
    after = {key: written_with(options, get_runtime(*key)) for key in before}
    changed = {key for key in before if before[key] != after[key]}
    assert changed == {("tensorrt-llm", "llm-api")}
