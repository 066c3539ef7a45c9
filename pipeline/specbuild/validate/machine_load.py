"""How busy this machine was with other work while we measured: the share of its CPU time that went to processes
other than this one and the local servers we talk to (Linux /proc/stat and /proc/<pid>/stat).

A speed comparison made while another job loads the machine is not trustworthy, and not symmetrically so: the
deployment that does more work per token on the CPU (the baseline sends one streamed response per token, several
times more than a speculative deployment) loses more to the contention, which inflates the speedup. The
performance check refuses to pass a speed gate when this share is high.

    meter = LoadMeter([server])      # LocalServer objects (their stubs included); this process always
    meter.start(); ...; sample = meter.stop()
    sample.foreign_share             # 0.0 .. 1.0 of the machine's CPU capacity; None without procfs
Standard library only.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from specbuild.validate.local_server import LocalServer, cpu_seconds_of

STAT = Path("/proc/stat")
BUSY_THRESHOLD = 0.25  # above this share of the machine's CPU time going to other work, a gate is not judged


def machine_cpu() -> tuple[int, float] | None:
    """(CPUs, busy CPU seconds since boot) from /proc/stat: user nice system irq softirq steal (not idle/iowait)."""
    try:
        lines = STAT.read_text().splitlines()
    except OSError:
        return None
    cpus = sum(1 for line in lines if line.startswith("cpu") and line[3:4].isdigit())
    fields = [int(x) for x in lines[0].split()[1:]]
    busy = sum(fields[i] for i in (0, 1, 2, 5, 6, 7) if i < len(fields))
    return max(cpus, 1), busy / os.sysconf("SC_CLK_TCK")


def own_cpu_seconds(servers: Sequence[LocalServer]) -> float:
    """CPU time of this process (every thread) and of the servers with their stubs (servers we started included:
    they are found by their ports; other children of ours count as foreign)."""
    pids = {os.getpid()}
    for server in servers:
        pids.update(server.processes())
    return sum(v for v in (cpu_seconds_of(p) for p in pids) if v is not None)


@dataclass
class LoadSample:
    wall_s: float
    cpus: int
    busy_cpu_s: float  # the whole machine
    own_cpu_s: float  # this process and the local servers
    foreign_share: float  # other processes' CPU time / (cpus * wall)

    def to_dict(self) -> dict:
        return {
            "wall_s": round(self.wall_s, 3),
            "cpus": self.cpus,
            "busy_cpu_s": round(self.busy_cpu_s, 3),
            "own_cpu_s": round(self.own_cpu_s, 3),
            "foreign_share": round(self.foreign_share, 4),
        }


class LoadMeter:
    """Measures the foreign CPU share between start() and stop(); stop() returns None without procfs."""

    def __init__(self, servers: Sequence[LocalServer] = ()):
        self.servers = list(servers)
        self._start: tuple[float, tuple[int, float], float] | None = None

    def start(self) -> None:
        cpu = machine_cpu()
        self._start = (time.monotonic(), cpu, own_cpu_seconds(self.servers)) if cpu is not None else None

    def stop(self) -> LoadSample | None:
        if self._start is None:
            return None
        t0, (cpus, busy0), own0 = self._start
        cpu = machine_cpu()
        if cpu is None:
            return None
        wall = max(time.monotonic() - t0, 1e-6)
        busy = max(cpu[1] - busy0, 0.0)
        own = max(own_cpu_seconds(self.servers) - own0, 0.0)
        # Own processes that ended during the interval are not counted: their time counts as foreign (an
        # overestimate, on the safe side).
        share = min(max(busy - own, 0.0) / (cpus * wall), 1.0)
        return LoadSample(wall, cpus, busy, own, share)
