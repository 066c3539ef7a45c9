"""What a specbuild process (or this test process) leaves behind: its marked processes, its /dev/shm regions, the
ports its servers listened on; and toy python models (INT32 X -> Y) to serve."""

from __future__ import annotations

import glob
import json
import os
import socket
import textwrap
import time
import urllib.request
from pathlib import Path
from typing import Callable

from specbuild.processes import child_watchdog


def alive(pid: int) -> bool:
    """Running: a zombie (ended, not yet collected) is not."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2 :][:1] not in ("Z", "X")


def marked_processes(owner: int, tag: str | None = None) -> list[int]:
    """Processes started (directly or not) by specbuild process `owner`: they carry SPECBUILD_OWNER=<owner>."""
    return child_watchdog.marked(owner, tag)


def shm_entries(owner: int, tag: str = "*") -> list[str]:
    return sorted(glob.glob(child_watchdog.shm_glob(owner, tag)))


def listening(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as s:
        s.settimeout(1.0)
        return s.connect_ex((host, port)) == 0


def eventually(condition: Callable[[], bool], timeout_s: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return condition()


# The stub's embedded Python ignores PYTHONPATH: a toy model that imports specbuild starts with this (the launcher
# puts the folder holding the specbuild package there), as the shipped models do at import.
USE_PYTHONPATH = """
import os as _os, sys as _sys
for _entry in reversed(_os.environ.get("PYTHONPATH", "").split(_os.pathsep)):
    if _entry and _entry not in _sys.path:
        _sys.path.insert(0, _entry)
"""


def python_model(repo: Path, name: str, source: str) -> None:
    """A python-backend model `name` in `repo` (input X, output Y: INT32 vectors) whose model.py is `source`."""
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(
        textwrap.dedent(f'''
        name: "{name}"
        backend: "python"
        max_batch_size: 0
        input [ {{ name: "X" data_type: TYPE_INT32 dims: [ -1 ] }} ]
        output [ {{ name: "Y" data_type: TYPE_INT32 dims: [ -1 ] }} ]
        instance_group [ {{ count: 1 kind: KIND_CPU }} ]
    ''')
    )
    (repo / name / "1" / "model.py").write_text(source)


def infer(server, model: str, values: list[int]) -> list[int]:
    """Y of one HTTP inference of `model` on X = values."""
    body = json.dumps({"inputs": [{"name": "X", "shape": [len(values)], "datatype": "INT32", "data": values}]})
    req = urllib.request.Request(
        f"{server.http_url}/v2/models/{model}/infer", data=body.encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())["outputs"][0]["data"]
