"""Nothing half-written (specbuild/files/atomic.py): folders appear complete or not at all, the previous one survives a
failure, leftovers of dead runs are removed with a notice, a file in the way is a user error."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from specbuild.files import atomic
from specbuild.errors import UserError


def test_replaces_in_one_step_and_keeps_the_old_one_on_failure(tmp_path):
    final = tmp_path / "out"
    atomic.write_tree(final, {"a.txt": "one", "sub/b.bin": b"\x00"})
    assert (final / "a.txt").read_text() == "one" and (final / "sub" / "b.bin").read_bytes() == b"\x00"
    with pytest.raises(RuntimeError):
        with atomic.atomic_folder(final) as tmp:
            (tmp / "a.txt").write_text("two")
            raise RuntimeError("interrupted")
    assert (final / "a.txt").read_text() == "one"
    atomic.write_tree(final, {"a.txt": "two"})
    assert (final / "a.txt").read_text() == "two" and not (final / "sub").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_leftovers_of_dead_processes_are_removed_with_a_notice(tmp_path):
    final = tmp_path / "engine"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = int(dead.stdout)
    (tmp_path / f".engine.partial-{pid}").mkdir()
    (tmp_path / f".engine.old-{pid}").mkdir()
    alive = tmp_path / f".engine.partial-{os.getppid()}"  # a live process: not ours to remove
    alive.mkdir()
    other = tmp_path / f".other.partial-{pid}"  # another output's leftover: not ours either
    other.mkdir()
    notices: list[str] = []
    atomic.write_tree(final, {"x": "1"}, notice=notices.append)
    assert len(notices) == 1 and "2 leftover folder(s)" in notices[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["engine", alive.name, other.name])


def test_a_file_in_the_way_and_an_unwritable_parent_are_user_errors(tmp_path):
    (tmp_path / "engine").write_text("not a folder")
    with pytest.raises(UserError, match="exists and is not a folder"):
        atomic.write_tree(tmp_path / "engine", {"x": "1"})
    with pytest.raises(UserError, match="cannot write .*engine/out"):  # its parent is a file (works as root too)
        atomic.write_tree(tmp_path / "engine" / "out", {"x": "1"})


def test_carried_files_move_into_the_new_folder(tmp_path):
    final = tmp_path / "report"
    atomic.write_tree(final, {"report.json": "{}"})
    (final / "server.log").write_text("started\n")
    log = open(final / "server.log", "a")  # a server still writing its log
    with atomic.atomic_folder(final, carry=("*.log",)) as tmp:
        (tmp / "report.json").write_text('{"new": 1}')
    log.write("still running\n")
    log.close()
    assert (final / "server.log").read_text() == "started\nstill running\n"
    assert (final / "report.json").read_text() == '{"new": 1}'
