"""Rehearse a bundle's container on CPU: run its exact command, with the image's paths mapped to local ones, and
probe it the way the kubelet would (scale-out issue part 3).

    result = rehearse(bundle, {"/abs/triton_repo/x": "/tmp/ref/triton_repo/x"}, binary=find_tritonserver(None))

What is mapped, and nothing else:
- paths in the command that the pod mounts (the repository) -> the local folder given for each;
- the image's tritonserver (/opt/tritonserver/bin/tritonserver, the launch script's default) -> `binary`, through
  the script's own TRITONSERVER override, and the image's backends folder -> the binary's `--backend-directory`
  (appended to the command; the script passes extra arguments to rank 0);
- `mpirun` -> specbuild's stand-in (mpirun_shim.py): CPU machines have no MPI, so it checks the options and runs
  rank 0 only (the rank that serves).
The llm-api flavour's single-node command runs no mpirun: its launch script execs the (mapped) tritonserver on the
repository it sits in, so the local folder must be a servable llm-api repository of the same recipe (on CPU: the
reference runtime's, whose model.py reads the same model.yaml).
Then: the startup probe's path on its port until 200 (within the probe's period x failureThreshold), the readiness
and liveness probes once, SIGTERM to the container's process, and an exit within terminationGracePeriodSeconds.
A wrong path or flag in the command makes the server fail to start, and the rehearsal raise UserError.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from specbuild.deploy.yamlio import load_all
from specbuild.errors import UserError

if TYPE_CHECKING:
    from specbuild.serve import ServerBinary

SHIM = Path(__file__).resolve().parent / "mpirun_shim.py"
WORKLOADS = ("deployment.yaml", "statefulset.yaml")


@dataclass
class Rehearsal:
    argv: list[str]  # what ran (after mapping)
    ports: dict[str, int]
    probes: dict[str, int] = field(default_factory=dict)  # probe -> HTTP status
    returncode: int | None = None
    log: Path | None = None


def serving_container(bundle: Path) -> tuple[dict, dict]:
    """(pod spec, the triton container) of a single-node bundle."""
    for name in WORKLOADS:
        path = bundle / name
        if path.is_file():
            spec = load_all(path.read_text())[0]["spec"]["template"]["spec"]
            return spec, next(c for c in spec["containers"] if c["name"] == "triton")
    raise UserError(
        f"{bundle}: no deployment.yaml or statefulset.yaml — only single-node bundles can be rehearsed "
        "on one machine (a LeaderWorkerSet's leader needs its worker pods)"
    )


def map_word(word: str, paths: dict[str, str]) -> str:
    for image_path, local in sorted(paths.items(), key=lambda kv: -len(kv[0])):
        if word == image_path or word.startswith(image_path + "/"):
            return local + word[len(image_path) :]
        if "=" in word and word.split("=", 1)[1].startswith(image_path):
            key, value = word.split("=", 1)
            return f"{key}={map_word(value, paths)}"
    return word


def _shim_dir(work: Path) -> Path:
    bin_dir = work / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    mpirun = bin_dir / "mpirun"
    mpirun.write_text(f"#!{sys.executable}\n" + SHIM.read_text())
    mpirun.chmod(0o755)
    return bin_dir


def _get(url: str) -> int | None:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return None


def rehearse(
    bundle: Path,
    paths: dict[str, str],
    *,
    binary: ServerBinary,
    work: Path,
    timeout_s: float = 300.0,
    while_up: Callable[[dict[str, int]], None] | None = None,
) -> Rehearsal:
    """Run the bundle's serving container command locally; `while_up(ports)` runs once every probe passed,
    before the stop signal."""
    spec, c = serving_container(Path(bundle))
    argv = [map_word(w, paths) for w in list(c.get("command") or []) + list(c.get("args") or [])]
    if binary.backend_dir is not None:
        argv.append(f"--backend-directory={binary.backend_dir}")
    ports = {p["name"]: p["containerPort"] for p in c.get("ports") or []}
    env = binary.environment()
    env.update({e["name"]: e["value"] for e in c.get("env") or [] if "value" in e})
    env["TRITONSERVER"] = str(binary.path)  # the launch script's override of IMAGE_TRITONSERVER
    env["PATH"] = f"{_shim_dir(work)}{os.pathsep}{env.get('PATH', '')}"
    for var in ("HTTP_PORT", "GRPC_PORT", "METRICS_PORT"):
        env.pop(var, None)  # the container sets none: the script's defaults (the recipe's ports) must hold
    log = work / "container.log"
    result = Rehearsal(argv, ports, log=log)
    start = time.monotonic()
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, start_new_session=True
        )
    try:
        startup = c["startupProbe"]
        budget = min(timeout_s, startup.get("periodSeconds", 10) * startup.get("failureThreshold", 3))
        url = f"http://127.0.0.1:{_port(startup, ports)}{startup['httpGet']['path']}"
        while True:
            status = _get(url)
            if status == 200:
                break
            if proc.poll() is not None:
                raise UserError(
                    f"the container command exited ({proc.returncode}) before its startup probe "
                    f"passed: {' '.join(argv)}\n{_tail(log)}"
                )
            if time.monotonic() - start > budget:
                raise UserError(
                    f"startup probe {url} did not pass within {budget:.0f} s (last status {status})\n{_tail(log)}"
                )
            time.sleep(0.5)
        result.probes["startupProbe"] = 200
        for key in ("readinessProbe", "livenessProbe"):
            probe = c[key]
            result.probes[key] = _get(f"http://127.0.0.1:{_port(probe, ports)}{probe['httpGet']['path']}") or 0
        if while_up is not None:
            while_up(ports)
        grace = spec.get("terminationGracePeriodSeconds", 30)
        proc.send_signal(signal.SIGTERM)  # the kubelet's stop signal, after preStop
        try:
            result.returncode = proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            raise UserError(
                f"the container did not stop within terminationGracePeriodSeconds ({grace} s) of SIGTERM\n{_tail(log)}"
            ) from None
        return result
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


def _port(probe: dict, ports: dict[str, int]) -> int:
    port = probe["httpGet"]["port"]
    return ports[port] if isinstance(port, str) else int(port)


def _tail(log: Path, lines: int = 15) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""
