"""`specbuild serve` while the server starts (issue #39 item 8): it says where the log goes, then a progress line at
the steady interval in a log, as compile's steps do, and the banner lines scripts read stay as they were. The log
goes beside the repository (or --log-dir), never to /tmp. A scripted server and a fake clock: no server starts and
no test waits for time to pass."""

from __future__ import annotations

import datetime as dt
import io
import re
from pathlib import Path

import pytest
from rich.console import Console

from specbuild.errors import UserError
from specbuild.output.events import EventLog
from specbuild.output.steps import Stages
from specbuild.serve import TritonServer, log_files
from specbuild.serve.command import _serve


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class SlowServer:
    """Starts in 42 s under load: loading after 16 s, live after 20 s, then its 5 models ready one by one (every
    4 s); then Ctrl-C."""

    def __init__(self, clock: FakeClock, repository: Path) -> None:
        self.clock, self.repository = clock, repository
        self.log_path = log_files.new_log_file(log_files.default_folder(repository))
        self.pid, self.http_address = 4242, "127.0.0.1:8000"
        self.grpc_url, self.metrics_url = "127.0.0.1:8001", "http://127.0.0.1:8002/metrics"
        self.cpu_split = self.admin_key = self.process = None
        self.stopped = False

    def start(self, timeout_s: float, progress) -> None:
        self.clock.now += 16
        progress("tritonserver is loading the models")
        self.clock.now += 4
        for ready in range(5):
            self.clock.now += 4
            progress(f"live; models ready: {ready}/5")
        self.clock.now += 2

    def repository_index(self):
        return [{"name": m, "state": "READY"} for m in ("ensemble", "postprocessing", "preprocessing")]

    def running(self) -> bool:
        raise KeyboardInterrupt  # the user's Ctrl-C once it serves

    def stop(self) -> None:
        self.stopped = True


def test_serve_says_where_the_log_goes_and_beats_while_the_server_starts(tmp_path):
    clock = FakeClock()
    err, out = io.StringIO(), io.StringIO()
    console, banner = Console(file=err, width=160), Console(file=out, width=60, soft_wrap=True)
    stages = Stages(console, events=EventLog(enabled=False), clock=clock, interval=15.0, background=False)
    server = SlowServer(clock, tmp_path / "demo")

    class Binary:
        def describe(self) -> str:
            return "tritonserver 2.53 (nvidia-pytriton)"

    assert _serve(server, Binary(), server.repository, 300, console, banner, stages) == 0 and server.stopped
    said = err.getvalue().splitlines()
    assert said[0] == f"tritonserver's log: {server.log_path}"
    start = f"start tritonserver 2.53 (nvidia-pytriton) on {server.repository}"
    assert said[1:4] == [
        f"… {start}: running for 16 s: tritonserver is loading the models",  # the first past 15 s
        f"… {start}: running for 32 s: live; models ready: 2/5",  # the first past 30 s
        f"✓ {start} (42.0 s)",
    ]
    lines = out.getvalue().splitlines()  # the banner scripts read: whole lines, even 60 columns wide
    assert lines[0] == f"serving {server.repository} with tritonserver 2.53 (nvidia-pytriton), pid 4242"
    assert "  HTTP     http://127.0.0.1:8000" in lines and f"  log      {server.log_path}" in lines
    assert lines[-1] == "Ctrl-C stops the server."


def test_a_log_nobody_names_goes_beside_the_repository_not_to_tmp(tmp_path):
    repo = tmp_path / "triton_repo" / "demo"
    server = TritonServer(repo)
    assert server.log_path.parent == tmp_path / "triton_repo" / "demo.logs"
    assert re.fullmatch(r"tritonserver-\d{8}T\d{6}Z-\d+\.log", server.log_path.name)
    assert not server.log_path.exists()  # named now, written when the server starts
    assert TritonServer(repo, log_dir=tmp_path / "logs").log_path.parent == tmp_path / "logs"
    assert TritonServer(repo, log_path=tmp_path / "x.log").log_path == tmp_path / "x.log"


def test_a_log_folder_keeps_the_newest_logs_and_those_of_running_processes(tmp_path):
    start = dt.datetime(2026, 12, 4, 10, 0, tzinfo=dt.timezone.utc)
    made = [log_files.new_log_file(tmp_path, start + dt.timedelta(minutes=i), pid=100 + i) for i in range(14)]
    for path in made:
        path.write_text("log")
    (tmp_path / "notes.log").write_text("not ours")
    gone = log_files.prune(tmp_path, keep=10, alive=lambda pid: pid == 101)  # the second oldest still runs
    assert sorted(gone) == sorted([made[0], made[2], made[3]])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [p.name for p in made[4:]] + [made[1].name, "notes.log"]
    )
    twin = log_files.new_log_file(tmp_path, start + dt.timedelta(minutes=13), pid=113)  # the same second, pid
    assert twin.name.endswith("-113-1.log")


def test_a_log_folder_that_cannot_be_written_is_a_user_error(tmp_path):
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the folder would go")
    (tmp_path / "repo").mkdir()
    server = TritonServer(tmp_path / "repo", log_dir=blocked / "logs")
    with pytest.raises(UserError, match=r"cannot write the server's log there .* --log-dir DIR"):
        server._launch()
