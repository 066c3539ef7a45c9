"""Hostile recipes: what a file can throw at `specbuild check`. Each is refused with exit 2, a message that names the
file (and line:col where the problem has a place), no traceback, and an answer — never a hang, never an
unbounded read. The committed ones under hostile/ state their expected problem in their first line, as
invalid/ does; the large and special files (50 MB, 10^5 keys, a 1.5 MB tree, FIFO, devices, ...) are made here.

The subprocess timeout only tells a hang from an answer; how much work a refusal does is counted, not timed
(test_refusals_are_bounded: bytes read, YAML events parsed, function calls), since the refusals are bounded by
construction (a size cap read with fstat before any byte, a value count and a depth limit checked while parsing)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from test_invalid_recipes import expectation

from specbuild.errors import RecipeError
from specbuild.recipe import load_recipe
from specbuild.recipe.yaml_source import MAX_DEPTH, MAX_RECIPE_BYTES, MAX_VALUES, load_located

HERE = Path(__file__).parent
ROOT = HERE.parents[1]
CASES = sorted((HERE / "hostile").glob("*.yaml"))
ANSWER_TIMEOUT_S = 10.0  # a hang is what is tested: a loaded 2-core CI machine needs ~1 s for the slowest


def check(path: Path | str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "pipeline"))
    return subprocess.run(
        [sys.executable, "-m", "specbuild.cli", "check", str(path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=ANSWER_TIMEOUT_S,
        stdin=subprocess.DEVNULL,
    )


HEAD = "name: t\nmodel:\n  checkpoint: ../ckpt/target\n"


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


# name -> (make(tmp_path) -> path, expected "where" prefix after the path ("" for the file itself), fragment)
def _sparse_50mb(tmp: Path) -> Path:
    p = _write(tmp / "huge.yaml", HEAD)
    os.truncate(p, 50 * 2**20)  # a 50 MB file: refused from its size, no byte read
    return p


def _unknown_keys(tmp: Path) -> Path:
    return _write(tmp / "keys.yaml", HEAD + "".join(f"key{i}: {i}\n" for i in range(10**5)))


def _tree_1_5mb(tmp: Path) -> Path:
    body = ", ".join("[0, 1, 2, 3, 4, 5, 6]" for _ in range(70_000))
    return _write(tmp / "tree.yaml", HEAD + "speculation:\n  method: medusa\n  choices: [" + body + "]\n")


def _keys_below_the_cap(tmp: Path) -> Path:
    text = HEAD + "build:\n" + "".join(f"  k{i}: 1\n" for i in range(MAX_VALUES // 2 - 200))
    assert len(text) < MAX_RECIPE_BYTES
    return _write(tmp / "keys-below-cap.yaml", text)


def _dense_values(tmp: Path) -> Path:
    text = HEAD + "speculation:\n  method: medusa\n  choices: [" + ",".join(["[0]"] * MAX_VALUES) + "]\n"
    assert len(text) < MAX_RECIPE_BYTES
    return _write(tmp / "dense.yaml", text)


def _deep_flow(tmp: Path) -> Path:
    return _write(tmp / "deep-flow.yaml", "name: t\nmodel: " + "[" * 5000 + "]" * 5000 + "\n")


def _deep_block(tmp: Path) -> Path:
    return _write(tmp / "deep-block.yaml", "".join("  " * i + "a:\n" for i in range(200)))


def _quadratic_aliases(tmp: Path) -> Path:
    """Few aliases of a large anchor: linear text, a large expansion."""
    text = (
        "name: t\nmodel:\n  checkpoint: ../ckpt/target\nvalidation:\n  prompts: &p ["
        + ", ".join(["x"] * 3000)
        + "]\n  concurrency: ["
        + ", ".join(["*p"] * 10)
        + "]\n"
    )
    return _write(tmp / "aliases.yaml", text)


def _not_utf8(tmp: Path) -> Path:
    p = tmp / "latin1.yaml"
    p.write_bytes(b"name: caf\xe9\nmodel:\n  checkpoint: x\n")
    return p


def _fifo(tmp: Path) -> Path:
    p = tmp / "recipe.yaml"
    os.mkfifo(p)  # no writer ever comes: reading it would block forever
    return p


def _socket(tmp: Path) -> Path:
    p = tmp / "recipe.sock"
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(p))
    _SOCKETS.append(s)
    return p


_SOCKETS: list[socket.socket] = []


def _symlink_to_dev_zero(tmp: Path) -> Path:
    p = tmp / "zero.yaml"
    p.symlink_to("/dev/zero")
    return p


def _folder(tmp: Path) -> Path:
    p = tmp / "recipe.yaml"
    p.mkdir()
    return p


def _control_character(tmp: Path) -> Path:
    return _write(tmp / "nul.yaml", "name: t\nmodel:\n  checkpoint: a\x00b\n")


GENERATED = {
    "50-MB": (_sparse_50mb, "", "a recipe may have at most 64 KiB"),
    "1e5-unknown-keys": (_unknown_keys, "", "a recipe may have at most 64 KiB"),
    "1.5-MB-tree": (_tree_1_5mb, "", "a recipe may have at most 64 KiB"),
    "unknown-keys-below-the-caps": (_keys_below_the_cap, ":5:3: build.k0:", "unknown key 'k0'"),
    "dense-values": (_dense_values, ":6:", f"more than {MAX_VALUES} values"),
    "5000-deep-flow": (_deep_flow, f":2:{8 + MAX_DEPTH - 1}:", f"nested more than {MAX_DEPTH} levels deep"),
    "200-deep-block": (
        _deep_block,
        f":{MAX_DEPTH + 1}:{2 * MAX_DEPTH + 1}:",
        f"nested more than {MAX_DEPTH} levels deep",
    ),
    "quadratic-aliases": (_quadratic_aliases, ":6:", "the alias *p makes the recipe hold more than"),
    "not-utf8": (_not_utf8, "", "is not UTF-8 text (byte 10, line 1"),
    "control-character": (_control_character, ":3:16:", "the control character #x0000 is not allowed"),
    "fifo": (_fifo, "", "is a FIFO (named pipe), not a regular file"),
    "socket": (_socket, "", "is a socket"),
    "symlink-to-dev-zero": (_symlink_to_dev_zero, "", "is a character device, not a regular file"),
    "folder": (_folder, "", "is a directory"),  # click refuses it before specbuild reads anything
}
DEVICES = ["/dev/zero", "/dev/urandom", "/dev/null", "/dev/stdin"]


def _assert_refused(result: subprocess.CompletedProcess, path: Path | str, where: str, fragment: str) -> None:
    assert result.returncode == 2, result.stdout + result.stderr
    err = result.stderr
    assert "Traceback" not in err and "internal error" not in err, err
    assert fragment in err, err[:2000]
    assert f"{path}{where}" in err, err[:2000]


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_hostile_recipe_is_reported_at_its_place(path: Path):
    line, col, field, fragment = expectation(path)
    with pytest.raises(RecipeError) as info:
        load_recipe(path)
    matching = [p for p in info.value.problems if fragment in p.message]
    assert matching, f"no problem mentions {fragment!r}; got:\n{info.value}"
    assert (matching[0].line, matching[0].col, matching[0].field) == (line, col, field), str(matching[0])


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_cli_check_refuses_a_hostile_recipe(path: Path):
    line, col, _, fragment = expectation(path)
    _assert_refused(check(path), path, f":{line}:{col}:", fragment)


@pytest.mark.parametrize("name", sorted(GENERATED))
def test_cli_check_refuses_a_hostile_file(tmp_path, name):
    make, where, fragment = GENERATED[name]
    path = make(tmp_path)
    _assert_refused(check(path), path, where, fragment)


@pytest.mark.parametrize("device", DEVICES)
def test_a_device_is_never_read(device):
    _assert_refused(check(device), device, "", "not a regular file")


def test_unreadable_recipe(tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root reads every file: permission denied cannot happen")
    path = _write(tmp_path / "secret.yaml", HEAD)
    path.chmod(0)
    _assert_refused(check(path), path, "", "permission denied")


# The most function calls (Python and C, as cProfile counts them) a refusal may cost. The largest today: 5.6 million
# for 4,800 unknown keys just below the caps, 4.4 million for 10,000 values (each read once, checked once); a
# 5,000-deep flow costs 3.7 million however deep it goes (ruamel's scanner looks ahead a fixed distance).
# A refusal that grew with what the file repeats or nests, rather than stopping at a cap, would pass this at once.
CALL_BUDGET = 8_000_000


@pytest.mark.parametrize("name", sorted(GENERATED))
def test_refusals_are_bounded(tmp_path, name, monkeypatch):
    """In-process, the loader's work on every generated file is bounded by construction, and counted here, not
    timed: it reads at most MAX_RECIPE_BYTES + 1 bytes (the size cap is checked with fstat before any byte; one
    more byte tells a file that grew), parses at most MAX_VALUES values and MAX_DEPTH levels' worth of YAML events
    (aliases count what they repeat), and makes at most CALL_BUDGET calls."""
    import cProfile

    from ruamel.yaml import YAML

    path = GENERATED[name][0](tmp_path)
    work = {"bytes": 0, "events": 0}
    real_read, real_parse = os.read, YAML.parse

    def counted_read(fd, n):
        data = real_read(fd, n)
        work["bytes"] += len(data)
        return data

    def counted_parse(self, stream, *args, **kwargs):
        for event in real_parse(self, stream, *args, **kwargs):
            work["events"] += 1
            yield event

    monkeypatch.setattr(os, "read", counted_read)
    monkeypatch.setattr(YAML, "parse", counted_parse)
    profile = cProfile.Profile()
    profile.enable()
    try:
        with pytest.raises(RecipeError):
            load_recipe(path)
    finally:
        profile.disable()
    calls = sum(entry.callcount for entry in profile.getstats())
    assert work["bytes"] <= MAX_RECIPE_BYTES + 1, work
    # every value is a start/end or scalar event (two per list or mapping); an alias is one event
    assert work["events"] <= 2 * MAX_VALUES + 2 * MAX_DEPTH + 8, work
    assert calls <= CALL_BUDGET, f"{calls} calls to refuse {name}"


def test_merge_keys_and_aliases_are_expanded():
    """Supported YAML: anchors, aliases and merge keys give the same data as the values written out."""
    from tempfile import TemporaryDirectory

    with TemporaryDirectory() as d:
        merged = _write(
            Path(d) / "m.yaml",
            "name: t\nmodel: &m {checkpoint: c, dtype: float32}\n"
            "triton: {<<: [{streaming: true, bls_instances: 2}, {bls_instances: 3, max_queue_size: 4}], "
            "bls_instances: 5}\nvalidation: {concurrency: &c [1, 2], prompts: [a, b]}\n"
            "build: {max_batch_size: &n 6, max_input_len: *n}\n",
        )
        plain = _write(
            Path(d) / "p.yaml",
            "name: t\nmodel: {checkpoint: c, dtype: float32}\n"
            "triton: {bls_instances: 5, streaming: true, max_queue_size: 4}\n"
            "validation: {concurrency: [1, 2], prompts: [a, b]}\n"
            "build: {max_batch_size: 6, max_input_len: 6}\n",
        )
        assert load_located(merged).data == load_located(plain).data


def test_yaml_1_2_scalars():
    from tempfile import TemporaryDirectory

    with TemporaryDirectory() as d:
        src = load_located(
            _write(
                Path(d) / "s.yaml",
                "a: yes\nb: 0x1F\nc: 1_000\nd: 2024-01-02\ne: ~\nf: 1.5e3\n"
                "g: !!str 12\nh: !!int '7'\ni: True\nj: -9223372036854775808\n",
            )
        )
    assert src.data == {
        "a": "yes",
        "b": 31,
        "c": 1000,
        "d": "2024-01-02",
        "e": None,
        "f": 1500.0,
        "g": "12",
        "h": 7,
        "i": True,
        "j": -(2**63),
    }


def teardown_module():
    for s in _SOCKETS:
        s.close()
