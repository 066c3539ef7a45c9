"""specbuild.signals through the CLI's main(): SIGTERM runs the same clean-up as Ctrl-C and exits 143 with one
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


@pytest.mark.parametrize("sig, code, line", [(signal.SIGTERM, 143, "terminated (SIGTERM)"),
                                             (signal.SIGINT, 130, "interrupted")], ids=["SIGTERM", "SIGINT"])
def test_a_signal_runs_the_clean_up_and_exits_with_its_code(tmp_path, sig, code, line):
    marker = tmp_path / "partial"
    env = dict(os.environ, PYTHONPATH=str(ROOT / "pipeline"))
    proc = subprocess.Popen([sys.executable, "-c", NAP, str(marker)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, preexec_fn=_as_from_a_terminal)
    assert proc.stdout.readline().strip() == "napping"
    assert marker.exists()
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == code
    assert not marker.exists()
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith(line) and "Traceback" not in err
