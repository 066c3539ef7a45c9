"""`specbuild compile` of the demo deployment (on the tiny models: tests/recipes/demo_tiny.yaml) signalled while it
serves and while it validates, as a terminal (Ctrl-C), a CI runner or Kubernetes (SIGTERM) and the OOM killer
(SIGKILL) would: it exits 130 / 143 with one line, or dies,
and afterwards no process it started runs, no port of its servers listens and none of its /dev/shm regions is
left. Processes are counted by the SPECBUILD_OWNER=<pid> every child (and grandchild) of specbuild carries.
Each case builds, serves and (for the validation phase) validates the demo: ~20-40 s each on 2 cores."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from specbuild.processes import child_watchdog

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "tests" / "recipes" / "demo_tiny.yaml"  # recipes/demo.yaml's deployment on the tiny models
pytestmark = [pytest.mark.timeout(400), pytest.mark.slow]


def _as_from_a_terminal() -> None:
    # a shell that starts pytest in the background leaves SIGINT ignored, and children inherit that: restore the
    # disposition an interactive Ctrl-C meets
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class Compile:
    def __init__(self, tmp: Path):
        self.tmp = tmp
        env = dict(os.environ, PYTHONPATH=str(ROOT / "pipeline"))
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "specbuild.cli",
                "compile",
                str(DEMO),
                "--engines-dir",
                str(tmp / "engines"),
                "--repo-dir",
                str(tmp / "triton_repo"),
                "--report-dir",
                str(tmp / "reports"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            preexec_fn=_as_from_a_terminal,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in iter(self.proc.stderr.readline, ""):
            self.lines.append(line.rstrip("\n"))

    @property
    def pid(self) -> int:
        return self.proc.pid

    def servers(self) -> list[int]:
        return [p for p in child_watchdog.marked(self.pid) if _cmdline(p).split(b"\0")[0].endswith(b"/tritonserver")]

    def wait_for(self, condition, what: str, timeout_s: float = 240) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if condition():
                return
            assert self.proc.poll() is None, f"compile ended before {what}:\n" + "\n".join(self.lines)
            time.sleep(0.1)
        raise AssertionError(f"no {what} within {timeout_s} s:\n" + "\n".join(self.lines))

    def ports(self) -> set[int]:
        """Every port a server of this compile said it listens on (from the server logs in the report folder)."""
        found = set()
        for log in (self.tmp / "reports").glob("*/tritonserver-*.log"):
            found |= {int(p) for p in re.findall(r"Started \w+(?: \w+)? at 127\.0\.0\.1:(\d+)", log.read_text())}
        return found


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _listening(port: int) -> bool:
    import socket

    with socket.socket() as s:
        s.settimeout(1.0)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _eventually(condition, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.2)
    return condition()


def _serving(c: Compile) -> None:
    """The target's server is ready, the baseline's is loading its models (python stubs started)."""
    c.wait_for(
        lambda: (
            any(ln.startswith("✓ serve") for ln in c.lines)
            and len(c.servers()) == 2
            and len(child_watchdog.marked(c.pid)) > 2
        ),
        "the second server loading",
    )


def _validating(c: Compile) -> None:
    """Both servers are ready and the validation suite's requests are under way: the target has answered some
    (its metrics endpoint counts them), and the suite sends the next at once."""
    c.wait_for(lambda: sum(ln.startswith("✓ serve") for ln in c.lines) >= 2, "validation")
    c.wait_for(lambda: _answered(c.tmp / "reports") > 0, "a validation request answered", timeout_s=120)


def _answered(reports: Path) -> float:
    """Inference requests the target server has answered (nv_inference_request_success, all models)."""
    import urllib.request

    logs = list(reports.glob("*/tritonserver-target.log"))
    port = re.search(r"Started Metrics Service at 127\.0\.0\.1:(\d+)", logs[0].read_text()) if logs else None
    if port is None:
        return 0
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port.group(1)}/metrics", timeout=5) as r:
            text = r.read().decode()
    except OSError:
        return 0
    return sum(
        float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith("nv_inference_request_success{")
    )


EXPECTED = {
    signal.SIGINT: (130, "interrupted"),
    signal.SIGTERM: (143, "terminated (SIGTERM)"),
    signal.SIGKILL: (-signal.SIGKILL, None),
}


@pytest.mark.parametrize("phase", [_serving, _validating], ids=["serving", "validation"])
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL], ids=lambda s: s.name)
def test_a_signalled_compile_leaves_nothing_running(tmp_path, sig, phase):
    c = Compile(tmp_path)
    try:
        phase(c)
        assert child_watchdog.marked(c.pid) and c.servers()
        shm_pattern = child_watchdog.shm_glob(c.pid)
        c.proc.send_signal(sig)
        sent = time.monotonic()
        code, message = EXPECTED[sig]
        returncode = c.proc.wait(timeout=120)
        print(f"{sig.name} during {phase.__name__}: exited {time.monotonic() - sent:.1f} s after the signal")
        c._reader.join(10)  # all it printed, before judging the exit code
        assert returncode == code, "\n".join(c.lines)
        if message is not None:
            assert c.lines[-1].startswith(message), "\n".join(c.lines)
            assert "Traceback" not in "\n".join(c.lines)
        # SIGKILL: the kernel kills the servers (death signal), the watchdog their stubs and /dev/shm regions
        assert _eventually(lambda: not child_watchdog.marked(c.pid), 30), [
            _cmdline(p) for p in child_watchdog.marked(c.pid)
        ]
        assert _eventually(lambda: not __import__("glob").glob(shm_pattern), 10)
        ports = c.ports()
        assert ports, "no server log named its ports"
        assert _eventually(lambda: not any(_listening(p) for p in ports), 10)
        assert not list((tmp_path / "engines").glob("*/.*partial*"))
    finally:
        if c.proc.poll() is None:
            c.proc.kill()
            c.proc.wait()


def test_an_interrupted_run_ends_with_its_own_line():
    """After 'interrupted', an object the signal cut off half-built (geventhttpclient's response, whose __init__
    never set `_sock`) failing in its __del__ while Python finalizes prints nothing more."""
    import subprocess
    import sys

    code = (
        "from specbuild.cli import _interrupted\n"
        "class HalfBuilt:\n"
        "    def __del__(self):\n"
        "        self._sock\n"
        "kept = HalfBuilt()\n"
        "raise SystemExit(_interrupted(KeyboardInterrupt()))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 130 and done.stderr == "interrupted\n", done.stderr
