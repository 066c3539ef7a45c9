"""An interrupted build leaves no partial engine: the child killed from outside, Ctrl-C, and SIGTERM to specbuild."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest
from trtllm_helpers import leftovers

from specbuild.errors import UserError
from specbuild.trtllm.proc import Interrupted


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie still answers kill(0): read its state
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def _when_building(root: Path, pid_file: Path, action, timeout: float = 30.0) -> threading.Thread:
    """Run action(pid) once trtllm-build has written rank0.engine into its partial folder."""

    def watch():
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            partial = [p for p in root.glob("engines/*/.target.partial-*/rank0.engine")]
            if partial and pid_file.exists() and pid_file.read_text():
                action(int(pid_file.read_text()))
                return
            time.sleep(0.05)

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    return t


@pytest.fixture
def slow_build(machine):
    pid_file = machine.root / "trtllm-build.pid"
    machine.set("SPECBUILD_DOUBLE_BUILD_SECONDS", "60")
    return pid_file


def test_killed_trtllm_build_leaves_no_engine(machine, slow_build, write_recipe, compile_engines):
    machine.set("SPECBUILD_DOUBLE_PID_FILE", str(slow_build))
    watcher = _when_building(machine.root, slow_build, lambda pid: os.kill(pid, signal.SIGKILL))
    with pytest.raises(UserError, match="killed by signal SIGKILL"):
        compile_engines(write_recipe("none"))
    watcher.join(5)
    assert not (machine.root / "engines" / "none" / "target").exists()
    assert not leftovers(machine.root)


@pytest.mark.parametrize("sig, raised", [(signal.SIGINT, KeyboardInterrupt), (signal.SIGTERM, Interrupted)])
def test_interrupting_specbuild_stops_the_child_and_cleans_up(
    machine, slow_build, write_recipe, compile_engines, sig, raised, request
):
    # Python maps SIGINT to KeyboardInterrupt only where SIGINT was not ignored at start (a pytest started in the
    # background of a script inherits it ignored): set what a terminal's Ctrl-C meets
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    request.addfinalizer(lambda: signal.signal(signal.SIGINT, previous))
    machine.set("SPECBUILD_DOUBLE_PID_FILE", str(slow_build))
    main = threading.main_thread().ident
    seen: list[int] = []

    def interrupt(pid):
        seen.append(pid)
        signal.pthread_kill(main, sig)

    watcher = _when_building(machine.root, slow_build, interrupt)
    with pytest.raises(raised):  # had the 60 s build been waited for, compile would have succeeded
        compile_engines(write_recipe("none"))
    watcher.join(5)
    assert seen and not _alive(seen[0])
    assert not (machine.root / "engines" / "none" / "target").exists()
    assert not leftovers(machine.root)


def test_stale_partial_of_a_dead_run_is_removed(machine, write_recipe, compile_engines):
    stale = machine.root / "engines" / "none" / ".target.partial-999999999"
    stale.mkdir(parents=True)
    (stale / "rank0.engine").write_text("half")
    compile_engines(write_recipe("none"))
    assert not stale.exists()


def _compile_cli(machine, recipe, **env):
    import subprocess
    import sys

    return subprocess.Popen(
        [sys.executable, "-m", "specbuild.cli", "compile", str(recipe), "--no-validate"],
        cwd=machine.root,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **env},
        start_new_session=True,
    )


def _wait_for(predicate, timeout=60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


@pytest.mark.timeout(300)
def test_sigkill_of_specbuild_in_the_engine_phase_kills_the_build_and_the_next_run_cleans_up(
    machine, slow_build, write_recipe
):
    """SIGKILL cannot be caught: the build child must still die (it is tied to specbuild's death) and the partial
    folder it leaves is removed by the next compile, which says so in one line (issue #16)."""
    recipe = write_recipe("none")
    proc = _compile_cli(machine, recipe, SPECBUILD_DOUBLE_PID_FILE=str(slow_build))
    partials = lambda: list(machine.root.glob("engines/*/.target.partial-*/rank0.engine"))  # noqa: E731
    assert _wait_for(lambda: partials() and slow_build.exists() and slow_build.read_text()), proc.stderr.read()
    build = int(slow_build.read_text())
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)
    assert _wait_for(lambda: not _alive(build), 15), "trtllm-build outlived the specbuild that started it"
    assert partials(), "a SIGKILLed run cannot clean up: its partial folder is what the next run removes"
    machine.set("SPECBUILD_DOUBLE_BUILD_SECONDS", None)
    again = _compile_cli(machine, recipe)
    out, err = again.communicate(timeout=240)
    assert again.returncode == 0, err
    assert "leftover folder(s) of interrupted runs" in err and ".target.partial-" in err
    assert not leftovers(machine.root)


@pytest.mark.timeout(300)
def test_sigterm_of_specbuild_in_the_engine_phase_exits_143_and_leaves_nothing(machine, slow_build, write_recipe):
    proc = _compile_cli(machine, write_recipe("none"), SPECBUILD_DOUBLE_PID_FILE=str(slow_build))
    assert _wait_for(
        lambda: (
            list(machine.root.glob("engines/*/.target.partial-*/rank0.engine"))
            and slow_build.exists()
            and slow_build.read_text()
        )
    )
    build = int(slow_build.read_text())
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert err.strip().splitlines()[-1].startswith("terminated"), err
    assert not _alive(build)
    assert not leftovers(machine.root) and not (machine.root / "engines" / "none" / "target").exists()
