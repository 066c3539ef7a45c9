"""specbuild.processes.signals through the CLI's main(): SIGTERM runs the same clean-up as Ctrl-C and exits 143 with one
line; Ctrl-C exits 130. A stand-in command that holds a resource in a `finally` shows the clean-up ran."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.timeout(60)

NAP = textwrap.dedent('''
    import sys, time
    from pathlib import Path
    from specbuild.cli import cli, main

    @cli.command()
    def nap():
        """Example: nap"""
        marker = Path(sys.argv[1])
        marker.write_text("partial")
        try:
            print("napping", flush=True)
            time.sleep(60)
        finally:
            marker.unlink()  # what a real command removes: partial output, a running server

    sys.exit(main(["nap"]))
''')


def _as_from_a_terminal() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize(
    "sig, code, line",
    [(signal.SIGTERM, 143, "terminated (SIGTERM)"), (signal.SIGINT, 130, "interrupted")],
    ids=["SIGTERM", "SIGINT"],
)
def test_a_signal_runs_the_clean_up_and_exits_with_its_code(tmp_path, sig, code, line):
    marker = tmp_path / "partial"
    env = dict(os.environ, PYTHONPATH=str(ROOT / "pipeline"))
    proc = subprocess.Popen(
        [sys.executable, "-c", NAP, str(marker)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        preexec_fn=_as_from_a_terminal,
    )
    assert proc.stdout.readline().strip() == "napping"
    assert marker.exists()
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == code
    assert not marker.exists()
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith(line) and "Traceback" not in err


LINGER = NAP.replace(
    "\nsys.exit(main",
    textwrap.dedent("""
    import atexit

    def linger():  # what a slow exit does: threads still joining, a finalizer waiting for a child
        print("exiting", file=sys.stderr, flush=True)
        time.sleep(2)

    atexit.register(linger)
    sys.exit(main"""),
)
assert LINGER != NAP


@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)], ids=["SIGTERM", "SIGINT"])
def test_a_second_signal_while_it_exits_changes_nothing(tmp_path, sig, code):
    """Ctrl-C pressed twice, or a runner that repeats its SIGTERM: once the clean-up has run and the line is out,
    the exit keeps its code and prints no traceback."""
    env = dict(os.environ, PYTHONPATH=str(ROOT / "pipeline"))
    proc = subprocess.Popen(
        [sys.executable, "-c", LINGER, str(tmp_path / "partial")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        preexec_fn=_as_from_a_terminal,
    )
    assert proc.stdout.readline().strip() == "napping"
    proc.send_signal(sig)
    err = []
    while not err or err[-1] not in ("exiting\n", ""):
        err.append(proc.stderr.readline())
    assert err[-1] == "exiting\n", err
    proc.send_signal(sig)
    _, rest = proc.communicate(timeout=30)
    assert proc.returncode == code and "Traceback" not in rest, rest
