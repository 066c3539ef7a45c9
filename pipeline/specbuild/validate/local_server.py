"""A Triton server running on this machine, seen through Linux procfs: its process, its python backend stubs (one
process per model instance, started by tritonserver), their memory (RSS) and CPU time.

    server = LocalServer.find("127.0.0.1:8000")     # the process listening on that port; None when not local
    server = LocalServer(pid)                       # when we started it (specbuild.serve.TritonServer.pid)
    server.stubs()        # {"tensorrt_llm_bls_0_0": 4242, ...}
    server.rss_bytes()    # tritonserver + stubs
    server.cpu_seconds()  # tritonserver + stubs, user + system

Everything returns None / {} where procfs is missing or the process is gone; nothing here raises for that.
Standard library only.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")
_INSTANCE = re.compile(r".+_\d+_\d+$")  # the stub's instance name argument, e.g. tensorrt_llm_bls_0_0
_LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def _stat_fields(pid: int) -> list[str] | None:
    """/proc/<pid>/stat fields after the command name (which may hold spaces): index 0 is the state."""
    text = _read(PROC / str(pid) / "stat")
    if text is None or ")" not in text:
        return None
    return text.rsplit(")", 1)[1].split()


def cpu_seconds_of(pid: int) -> float | None:
    """User + system CPU time of one process (its threads included), in seconds."""
    fields = _stat_fields(pid)
    if fields is None:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_bytes_of(pid: int) -> int | None:
    text = _read(PROC / str(pid) / "status")
    if text is None:
        return None
    m = re.search(r"^VmRSS:\s+(\d+) kB", text, re.M)
    return int(m.group(1)) * 1024 if m else None


def alive(pid: int) -> bool:
    fields = _stat_fields(pid)
    return fields is not None and fields[0] not in ("Z", "X")


def children_of(pid: int) -> list[int]:
    """Direct children: every thread's `children` list, else (kernels without it) a scan of the parent ids."""
    out: list[int] = []
    tasks = list((PROC / str(pid) / "task").glob("*"))
    if tasks and (tasks[0] / "children").exists():
        for task in tasks:
            text = _read(task / "children")
            if text:
                out += [int(x) for x in text.split()]
        return sorted(set(out))
    for proc in PROC.glob("[0-9]*"):
        fields = _stat_fields(int(proc.name))
        if fields is not None and fields[1] == str(pid):
            out.append(int(proc.name))
    return sorted(out)


def _listening_inodes(port: int) -> set[str]:
    inodes = set()
    for table in ("tcp", "tcp6"):
        text = _read(PROC / "net" / table)
        for line in (text or "").splitlines()[1:]:
            cols = line.split()
            if len(cols) > 9 and cols[3] == _LISTEN and int(cols[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(cols[9])
    return inodes


def listening_pid(port: int) -> int | None:
    """The process (readable by us) that listens on this TCP port of this machine."""
    inodes = {f"socket:[{i}]" for i in _listening_inodes(port)}
    if not inodes:
        return None
    for proc in PROC.glob("[0-9]*"):
        try:
            for fd in (proc / "fd").iterdir():
                if os.readlink(fd) in inodes:
                    return int(proc.name)
        except OSError:  # another user's process, or it just ended
            continue
    return None


@dataclass(frozen=True)
class LocalServer:
    """A tritonserver process of this machine."""

    pid: int

    @classmethod
    def find(cls, http_address: str) -> "LocalServer | None":
        """The server answering at host:port when the host is this machine's loopback; None otherwise."""
        host, _, port = http_address.rpartition(":")
        host = host.strip("[]")
        if not (host == "localhost" or host == "::1" or host.startswith("127.")) or not port.isdigit():
            return None
        pid = listening_pid(int(port))
        return cls(pid) if pid is not None else None

    def alive(self) -> bool:
        return alive(self.pid)

    def stubs(self) -> dict[str, int]:
        """Python backend stub processes by model instance name (e.g. tensorrt_llm_bls_0_0)."""
        out = {}
        for child in children_of(self.pid):
            raw = _read(PROC / str(child) / "cmdline")
            if not raw or "triton_python_backend_stub" not in raw.split("\0", 1)[0]:
                continue
            args = [a for a in raw.split("\0") if a]
            name = next((a for a in reversed(args) if _INSTANCE.match(a) and "/" not in a), None)
            if name is None and len(args) > 1:  # .../<model>/<version>/model.py
                name = Path(args[1]).parent.parent.name
            out[name or str(child)] = child
        return out

    def processes(self) -> list[int]:
        return [self.pid] + children_of(self.pid)

    def rss_bytes(self) -> int | None:
        """Resident memory of the server and every process it started (its stubs)."""
        values = [rss_bytes_of(p) for p in self.processes()]
        return sum(v for v in values if v is not None) if values and values[0] is not None else None

    def cpu_seconds(self) -> float:
        return sum(v for v in (cpu_seconds_of(p) for p in self.processes()) if v is not None)
