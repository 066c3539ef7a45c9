"""The build cache (specbuild.cache.step_store): entries written whole, restored only while their files hash as stored,
pruned by age, size or all; `specbuild cache list|prune` and its usage errors."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from specbuild.cli import cli
from specbuild.cache.provenance import MANIFEST
from specbuild.cache.step_cache import content_digest
from specbuild.cache.step_store import ENTRY, OUTPUT, Store, parse_duration, parse_size


def _output(folder: Path, text: str = "weights") -> Path:
    (folder / "sub").mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"text": text}))
    (folder / "sub" / "rank0.engine").write_bytes(text.encode() * 100)
    (folder / MANIFEST).write_text("{}")  # not content: left out of the entry
    return folder


def test_an_output_stored_and_restored_is_the_same_files(tmp_path):
    store = Store(tmp_path / "cache")
    out = _output(tmp_path / "engine")
    entry = store.put("k1", out, step="engine", recipe="demo", role="target")
    assert entry.content == content_digest(out) and entry.size == len("weights") * 100 + len('{"text": "weights"}')
    assert not (entry.output / MANIFEST).exists()
    target = tmp_path / "restored"
    assert store.restore(store.lookup("k1"), target) == content_digest(out)
    assert (target / "sub" / "rank0.engine").read_bytes() == (out / "sub" / "rank0.engine").read_bytes()
    assert [e.key for e in store.entries()] == ["k1"] and store.lookup("other") is None


@pytest.mark.parametrize("damage", ["edited", "removed", "no entry.json", "torn entry.json", "key mismatch"])
def test_a_damaged_or_half_written_entry_is_never_used_and_is_removed(tmp_path, damage):
    store = Store(tmp_path / "cache")
    entry = store.put("k1", _output(tmp_path / "engine"), step="engine", recipe="demo")
    engine_file = entry.output / "sub" / "rank0.engine"
    if damage == "edited":
        os.unlink(engine_file)  # a file of the entry, rewritten (not the hard-linked original)
        engine_file.write_bytes(b"other bytes")
    elif damage == "removed":
        engine_file.unlink()
    elif damage == "no entry.json":
        (entry.folder / ENTRY).unlink()
    elif damage == "torn entry.json":
        (entry.folder / ENTRY).write_text('{"key": "k1", "cont')
    else:
        data = json.loads((entry.folder / ENTRY).read_text())
        (entry.folder / ENTRY).write_text(json.dumps({**data, "key": "k2"}))
    assert store.lookup("k1") is None and not entry.folder.exists()


def test_put_is_atomic_and_leftovers_of_dead_runs_are_pruned(tmp_path):
    store = Store(tmp_path / "cache")
    leftover = store.root / ".k1.partial-999999999"  # a put interrupted by a process that is gone
    (leftover / OUTPUT).mkdir(parents=True)
    assert store.lookup("k1") is None and store.entries() == []
    store.put("k1", _output(tmp_path / "engine"), step="engine", recipe="demo")
    assert store.lookup("k1") is not None
    store.prune(older_than_s=1e9)
    assert not leftover.exists() and store.lookup("k1") is not None


def test_prune_by_age_by_size_and_all(tmp_path):
    store = Store(tmp_path / "cache")
    now = time.time()
    for i, key in enumerate(("old", "mid", "new")):
        entry = store.put(key, _output(tmp_path / key, key * 10), step="repository", recipe="demo")
        os.utime(entry.folder / ENTRY, (now - (3 - i) * 86400, now - (3 - i) * 86400))
    removed = store.prune(older_than_s=2.5 * 86400, now=now)
    assert [e.key for e in removed] == ["old"]
    sizes = {e.key: e.size for e in store.entries()}
    removed = store.prune(max_size=sizes["new"], now=now)  # the least recently used goes first
    assert [e.key for e in removed] == ["mid"] and [e.key for e in store.entries()] == ["new"]
    assert [e.key for e in store.prune(everything=True)] == ["new"] and store.entries() == []


def test_sizes_and_ages_are_read_as_written():
    assert parse_size("200G") == 200 * 1024**3 and parse_size("1.5KiB") == 1536 and parse_size("4096") == 4096
    assert parse_duration("14d") == 14 * 86400 and parse_duration("90s") == 90
    for bad in ("lots", "-1G"):
        with pytest.raises(ValueError, match="not a size|negative"):
            parse_size(bad)
    for bad in ("14", "fortnight", "d"):
        with pytest.raises(ValueError, match="not an age"):
            parse_duration(bad)


def test_cache_list_and_prune_commands(tmp_path):
    store = Store(tmp_path / "cache")
    store.put("a" * 64, _output(tmp_path / "engine"), step="engine", recipe="demo-tiny", role="target")
    runner = CliRunner()
    listed = runner.invoke(cli, ["cache", "list", "--cache-dir", str(store.root)])
    assert listed.exit_code == 0, listed.output
    header, row = listed.output.splitlines()[:2]
    assert header.split() == ["KEY", "STEP", "RECIPE", "ROLE", "SIZE", "AGE"]
    assert row.split()[:4] == ["a" * 16, "engine", "demo-tiny", "target"] and "1 entries" in listed.output
    doc = json.loads(runner.invoke(cli, ["cache", "list", "--json", "--cache-dir", str(store.root)]).output)
    assert [e["key"] for e in doc["entries"]] == ["a" * 64]
    kept = runner.invoke(cli, ["cache", "prune", "--older-than", "1d", "--cache-dir", str(store.root)])
    assert kept.exit_code == 0 and "removed 0 entries" in kept.output
    pruned = runner.invoke(cli, ["cache", "prune", "--all", "--cache-dir", str(store.root)])
    assert pruned.exit_code == 0 and "removed 1 entries" in pruned.output and store.entries() == []


@pytest.mark.parametrize(
    "args, says",
    [
        ([], "--older-than AGE, --max-size SIZE or --all"),
        (["--older-than", "soon"], "--older-than"),
        (["--max-size", "big"], "--max-size"),
    ],
)
def test_cache_prune_usage_errors_exit_2_and_say_what_to_write(tmp_path, args, says):
    result = CliRunner().invoke(cli, ["cache", "prune", "--cache-dir", str(tmp_path), *args])
    assert result.exit_code == 2 and says in result.output


def _compile(recipe: Path, tmp: Path, cache: Path, capsys) -> tuple[dict[str, str], str]:
    from specbuild.cli import main

    code = main(
        [
            "compile",
            str(recipe),
            "--no-validate",
            "--json",
            "--engines-dir",
            str(tmp / "e"),
            "--repo-dir",
            str(tmp / "r"),
            "--report-dir",
            str(tmp / "rep"),
            "--cache-dir",
            str(cache),
        ]
    )
    out, err = capsys.readouterr()
    assert code == 0, err
    return {s["name"].split(" ")[0]: s["status"] for s in json.loads(out)["steps"]}, err


def _demo_tiny(tmp: Path) -> Path:
    root = Path(__file__).resolve().parents[2]
    path = tmp / "r.yaml"
    path.write_text(
        (root / "tests" / "recipes" / "demo_tiny.yaml")
        .read_text()
        .replace("../../checkpoints", str(root / "checkpoints"))
    )
    return path


def test_compile_rebuilds_rather_than_restore_a_damaged_entry(tmp_path, capsys):
    import shutil

    recipe, cache = _demo_tiny(tmp_path), tmp_path / "cache"
    assert _compile(recipe, tmp_path, cache, capsys)[0]["engines"] == "done"
    engines = [e for e in Store(cache).entries() if e.step == "engine"]
    assert {e.role for e in engines} == {"target", "baseline"}
    damaged = next(e for e in engines if e.role == "target")
    config = damaged.output / "config.json"
    text = config.read_text()
    assert '"max_batch_size": 8' in text
    config.unlink()  # a different file where the entry's was (the original in place keeps its bytes)
    config.write_text(text.replace('"max_batch_size": 8', '"max_batch_size": 9'))
    shutil.rmtree(tmp_path / "e")
    steps, err = _compile(recipe, tmp_path, cache, capsys)
    assert steps["engines"] == "done" and "restored from the build cache" not in err
    assert Store(cache).lookup(damaged.key) is not None  # stored again, whole


def test_a_cache_that_cannot_be_written_is_said_and_the_build_goes_on(tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    steps, err = _compile(_demo_tiny(tmp_path), tmp_path, blocker / "cache", capsys)
    assert set(steps.values()) == {"done"} and "not stored in the build cache" in err
