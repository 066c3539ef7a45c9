"""A tritonserver process serving one model repository: start (wait until live and every model ready), stop.

    with TritonServer(Path("triton_repo/demo"), binary=find_tritonserver(None)) as server:   # free loopback ports
        server.http_url, server.grpc_url, server.metrics_url

`start()` returns once the server is live and every model it should load reports ready on its own
`/v2/models/<name>/ready` endpoint, saying how far it got through `progress` while it waits. When it is not, it
raises `UserError` with each model's load error in plain words and the log path. The log goes to `log_path`, else a
new file in `log_dir`, else beside the repository (serve/log_files.py: triton_repo/demo logs into
triton_repo/demo.logs/); `log_path` names it from the start. `stop()` stops the server by its own PID (SIGINT, then
SIGKILL after a timeout), kills what it left (python backend stubs) and removes its /dev/shm regions. A server
stopped before it was ready (a failed start, Ctrl-C or SIGTERM while it loads its models) is killed at once: it has
no request to finish, and a SIGINT that meets tritonserver's handler while models load is acted on only after the
load (python stubs importing torch: tens of seconds on a busy CPU) and the exit timeout. The server never outlives
this process, even when it is killed (specbuild.processes.children).

Model control: with `model_control="explicit"` Triton's model-repository API (index, load, unload — a load may
carry the files of a model, python code included) answers only requests that carry the header
`ADMIN_HEADER: <server.admin_key>` over HTTP, metadata `GRPC_ADMIN_HEADER: <key>` over gRPC
(--http-restricted-api / --grpc-restricted-protocol; checked with nvidia-pytriton 0.7.0's tritonserver: a request
without the key gets HTTP 403 "This API is restricted").
Standard library only: importing this module is cheap.
"""

from __future__ import annotations

import atexit
import json
import os
import re
import secrets
import signal
import subprocess
import time
import urllib.error
import urllib.request
import uuid
import weakref
from pathlib import Path
from typing import Callable, Iterable, Sequence

from specbuild.processes import children
from specbuild.errors import UserError
from specbuild.serve import decode_cpus as decode_cpus_module
from specbuild.serve import log_files
from specbuild.serve.binary import ServerBinary, find_tritonserver
from specbuild.serve.ports import free_ports, port_in_use
from specbuild.serve.server_log import ADDRESS_IN_USE, hint, load_errors_from_log, plain_reason, strip_prefix

# A repository with this script at its root starts through it (GPU repositories of both flavours: mpirun ranks,
# orchestrator mode, trtllm-llmapi-launch); tritonserver ignores plain files at the repository root.
LAUNCH_SCRIPT = "launch_triton.sh"
ADMIN_HEADER = "specbuild-admin-key"  # HTTP header (gRPC metadata keys are lower case too)
GRPC_ADMIN_HEADER = "triton-grpc-protocol-" + ADMIN_HEADER  # the metadata key tritonserver expects over gRPC


class TritonServer:
    """A tritonserver process serving one model repository on loopback ports."""

    def __init__(
        self,
        repository: Path,
        *,
        host: str = "127.0.0.1",
        http_port: int | None = None,
        grpc_port: int | None = None,
        metrics_port: int | None = None,
        binary: ServerBinary | Path | str | None = None,
        model_control: str = "none",
        load_models: Sequence[str] | None = None,
        log_path: Path | None = None,
        log_dir: Path | None = None,
        exit_timeout_s: int = 5,
        extra_args: Iterable[str] = (),
        log_verbose: int = 0,
        launcher: Path | None = None,
        decode_cpus: str = "off",
    ):
        """launcher: a repository's launch_triton.sh (GPU repositories: mpirun ranks, orchestrator mode); it
        takes the ports from HTTP_PORT/GRPC_PORT/METRICS_PORT and passes our other arguments to rank 0.
        decode_cpus: auto | off | CPU ids kept for the reference core's executor thread (serve/decode_cpus.py);
        `client_cpus` then names the CPUs left, for clients on this machine to run on."""
        if model_control not in ("none", "explicit"):
            raise ValueError(f"model_control must be 'none' or 'explicit', not {model_control!r}")
        if load_models and model_control != "explicit":
            raise ValueError("load_models needs model_control='explicit'")
        self.repository = Path(repository).resolve()
        self.host = host
        self._requested_ports = (http_port, grpc_port, metrics_port)
        self.http_port, self.grpc_port, self.metrics_port = http_port, grpc_port, metrics_port
        # a ServerBinary, or the path of a tritonserver (--tritonserver), or None: found on first use
        self._binary = binary if isinstance(binary, ServerBinary) or binary is None else find_tritonserver(Path(binary))
        self.model_control = model_control
        self.load_models = list(load_models or [])
        # a log named by nobody goes into a folder of ours (log_files.py), whose oldest logs are pruned at launch
        self._log_folder = None if log_path else Path(log_dir) if log_dir else log_files.default_folder(self.repository)
        self.log_path = Path(log_path) if log_path else log_files.new_log_file(self._log_folder)
        self.exit_timeout_s = int(exit_timeout_s)
        self.extra_args = list(extra_args)
        self.log_verbose = log_verbose
        self.launcher = Path(launcher) if launcher else None
        self.decode_cpus = decode_cpus
        self.cpu_split: decode_cpus_module.CpuSplit | None = None  # set at launch when CPUs are kept for the decoder
        self.server_id = f"specbuild-{uuid.uuid4().hex[:12]}"  # GET /v2 names it: proves we talk to our server
        self.tag = children.new_tag()  # marks its processes (SPECBUILD_CHILD) and names its /dev/shm regions
        self.shm_prefix = children.shm_prefix(self.tag)
        # explicit model control: the model-repository API answers only requests carrying this key
        self.admin_key = secrets.token_urlsafe(24) if model_control == "explicit" else None
        self.process: subprocess.Popen | None = None
        self._ready = False  # live and every model ready: stop() lets it finish its requests (SIGINT)
        self._log_file = None
        self._finalizer: weakref.finalize | None = None

    # endpoints ---------------------------------------------------------------------------------------------
    @property
    def binary(self) -> ServerBinary:
        if self._binary is None:
            self._binary = find_tritonserver(None)
        return self._binary

    @property
    def http_address(self) -> str:
        """host:port of the HTTP endpoint (the form tritonclient.http takes)."""
        return f"{self.host}:{self.http_port}"

    @property
    def http_url(self) -> str:
        return f"http://{self.host}:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        """host:port of the gRPC endpoint (the form tritonclient.grpc takes; gRPC targets have no scheme)."""
        return f"{self.host}:{self.grpc_port}"

    @property
    def metrics_url(self) -> str:
        return f"http://{self.host}:{self.metrics_port}/metrics"

    @property
    def client_cpus(self) -> frozenset[int] | None:
        """The CPUs left to tritonserver when some are kept for the decoder (None: none kept): where a client on
        this machine should run (`decode_cpus.running_on(server.client_cpus)`)."""
        return self.cpu_split.rest if self.cpu_split else None

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def exit_reason(self) -> str | None:
        """How the started server ended without being stopped (None while it runs, or once `stop` ran)."""
        code = self.process.poll() if self.process is not None else None
        if code is None:
            return None
        try:
            how = f"was killed by {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}"
        except ValueError:
            how = f"ended with status {code}"
        return f"tritonserver (pid {self.process.pid}) {how}" + (
            f" (its log: {self.log_path})" if self.log_path else ""
        )

    def argv(self) -> list[str]:
        b = self.binary
        if self.launcher is not None:  # the script names the repository and the ports itself
            argv = ["bash", str(self.launcher)]
        else:
            argv = [str(b.path), "--model-repository", str(self.repository)]
            argv += [
                "--http-port",
                str(self.http_port),
                "--grpc-port",
                str(self.grpc_port),
                "--metrics-port",
                str(self.metrics_port),
            ]
        if b.backend_dir is not None:  # a launch script passes it on (to rank 0) with our other arguments
            argv += ["--backend-directory", str(b.backend_dir)]
        argv += [
            "--http-address",
            self.host,
            "--grpc-address",
            self.host,
            "--metrics-address",
            self.host,
            f"--exit-timeout-secs={self.exit_timeout_s}",
            f"--log-verbose={self.log_verbose}",
            f"--id={self.server_id}",
            # A per-server shared-memory prefix: servers side by side never share python stub regions, and what a
            # killed server leaves in /dev/shm is found and removed (specbuild.processes.children).
            f"--backend-config=python,shm-region-prefix-name={self.shm_prefix}",
        ]
        if self.model_control == "explicit":
            argv.append("--model-control-mode=explicit")
            argv += [f"--load-model={m}" for m in self.load_models]
            # Loading a model may upload its files (python code included): only for clients holding the key.
            argv += [
                f"--http-restricted-api=model-repository:{ADMIN_HEADER}={self.admin_key}",
                f"--grpc-restricted-protocol=model-repository:{ADMIN_HEADER}={self.admin_key}",
            ]
        return argv + self.extra_args

    # lifecycle ---------------------------------------------------------------------------------------------
    def start(self, timeout_s: float = 180.0, progress: Callable[[str], None] | None = None) -> "TritonServer":
        """Start the server and wait until it is live and every model it loads is ready."""
        if self.running():
            return self
        if not self.repository.is_dir():
            raise UserError(
                f"model repository {self.repository} does not exist — write it first "
                "(specbuild compile) or give the path of a Triton model repository"
            )
        attempts = 3 if None in self._requested_ports else 1
        for attempt in range(attempts):
            try:
                self._launch()
                self._wait_ready(timeout_s, progress)
                self._ready = True
                return self
            except _PortTaken:
                self.stop()
                if attempt == attempts - 1:
                    raise UserError(
                        f"tritonserver could not bind its ports ({self.http_port}, {self.grpc_port}, "
                        f"{self.metrics_port}) — choose other ports; log: {self.log_path}"
                    ) from None
            except BaseException:
                self.stop()
                raise
        return self

    def _launch(self) -> None:
        free = iter(free_ports(self.host, 3))
        self.http_port, self.grpc_port, self.metrics_port = (
            p if p is not None else next(free) for p in self._requested_ports
        )
        for what, port in (
            ("--http-port", self.http_port),
            ("--grpc-port", self.grpc_port),
            ("--metrics-port", self.metrics_port),
        ):
            if port_in_use(self.host, port):
                if None in self._requested_ports and port not in self._requested_ports:
                    raise _PortTaken()
                raise UserError(
                    f"{what} {port}: the port is already in use on {self.host} (another tritonserver?) "
                    "— stop that server or choose another port"
                )
        try:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            self._log_file = open(self.log_path, "wb")
        except OSError as e:
            raise UserError(
                f"{self.log_path}: cannot write the server's log there ({e.strerror or e}) — give a folder "
                "that can be written (specbuild serve --log-dir DIR, or --log FILE)"
            ) from None
        if self._log_folder is not None:
            log_files.prune(self._log_folder)
        env = self.binary.environment()
        if self.launcher is not None:
            env.update(
                TRITONSERVER=str(self.binary.path),
                HTTP_PORT=str(self.http_port),
                GRPC_PORT=str(self.grpc_port),
                METRICS_PORT=str(self.metrics_port),
            )
        self.cpu_split = None
        if decode_cpus_module.honours(self.repository):
            self.cpu_split = decode_cpus_module.plan(
                self.decode_cpus,
                decode_cpus_module.allowed_cpus(),
                decode_cpus_module.torch_threads(),
                where="decode_cpus",
            )
        env.pop(decode_cpus_module.EXECUTOR_ENV, None)
        if self.cpu_split is not None:
            env[decode_cpus_module.EXECUTOR_ENV] = self.cpu_split.env_value()
        with decode_cpus_module.running_on(self.cpu_split.rest if self.cpu_split else None):  # the child inherits
            self.process = children.spawn(
                self.argv(),
                tag=self.tag,
                stdout=self._log_file,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
            )
        self._finalizer = weakref.finalize(self, _stop_process, self.process, self.tag, self.exit_timeout_s + 10)
        atexit.register(self._finalizer)

    def _wait_ready(self, timeout_s: float, progress: Callable[[str], None] | None) -> None:
        deadline = time.monotonic() + timeout_s
        announced = False
        while time.monotonic() < deadline:
            if not self.running():
                self._fail("tritonserver exited during startup")
            if self._get("/v2/health/live") == 200:
                name = self.server_metadata().get("name")
                if name != self.server_id:
                    if self._requested_ports[0] is None:
                        # Another process took the port we chose while ours was still loading (chosen free
                        # moments ago, bound only after the models load): choose again.
                        raise _PortTaken()
                    self._fail(f"another server (id {name!r}) answers on {self.http_address}")
                break
            if progress and not announced:
                progress("tritonserver is loading the models")
                announced = True
            time.sleep(0.2)
        else:
            self._fail(f"tritonserver was not live within {timeout_s:.0f} s")
        expected = self._expected_models()
        pending = set(expected)
        said = None
        while time.monotonic() < deadline:
            if not self.running():
                self._fail("tritonserver exited during startup")
            for name in sorted(pending):
                if self._get(f"/v2/models/{name}/ready") == 200:
                    pending.discard(name)
            if not pending:
                return
            waiting = ", ".join(sorted(pending))
            ready = f"live; models ready: {len(expected) - len(pending)}/{len(expected)} (waiting for {waiting})"
            if progress and ready != said:
                progress(ready)
                said = ready
            index = self.repository_index()
            failed = {
                e["name"]: e.get("reason", "")
                for e in index
                if e.get("name") in pending and e.get("state") == "UNAVAILABLE" and e.get("reason")
            }
            if failed:
                self._fail("some models failed to load", failed)
            time.sleep(0.2)
        self._fail(f"models not ready within {timeout_s:.0f} s: {', '.join(sorted(pending))}")

    def _expected_models(self) -> list[str]:
        if self.model_control == "explicit" and "*" not in self.load_models:
            names = set(self.load_models)
            # An ensemble loads its steps too.
            for name in list(names):
                names.update(_ensemble_steps(self.repository / name / "config.pbtxt"))
            return sorted(names)
        return sorted(e["name"] for e in self.repository_index() if "name" in e)

    def _fail(self, what: str, reasons: dict[str, str] | None = None) -> None:
        log = self.read_log()
        errors = load_errors_from_log(log)
        errors.update({k: v for k, v in (reasons or {}).items() if k not in errors})
        self.stop()
        lines = [f"{what} (repository {self.repository}, server {self.binary.describe()})"]
        for model, reason in sorted(errors.items()):
            short = plain_reason(reason)
            lines.append(f"  model {model}: {short}{hint(short)}")
        if not errors:
            tail = [ln for ln in log.splitlines() if ln.startswith("E") or "error" in ln.lower()][-5:]
            lines += ["  " + strip_prefix(ln) for ln in tail]
        if any(s in log for s in ADDRESS_IN_USE) and "failed to load" not in log and None in self._requested_ports:
            raise _PortTaken()
        lines.append(f"  full log: {self.log_path}")
        raise UserError("\n".join(lines))

    def stop(self, timeout_s: float | None = None) -> int | None:
        """Stop the server by its PID: SIGINT, then SIGKILL (its process group) after `timeout_s`; a server that
        was not ready yet gets SIGKILL at once (nothing to finish; see the module's docstring)."""
        proc = self.process
        if proc is None:
            return None
        if timeout_s is None:
            timeout_s = self.exit_timeout_s + 10 if self._ready else 0
        self._ready = False
        _stop_process(proc, self.tag, timeout_s)
        if self._finalizer is not None:
            atexit.unregister(self._finalizer)
            self._finalizer.detach()
            self._finalizer = None
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
        self.process = None
        return proc.returncode

    def __enter__(self) -> "TritonServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # small HTTP helpers ------------------------------------------------------------------------------------
    def _get(self, path: str, timeout: float = 2.0) -> int | None:
        try:
            with urllib.request.urlopen(self.http_url + path, timeout=timeout) as r:
                return r.status
        except urllib.error.HTTPError as e:
            return e.code
        except (OSError, ValueError):
            return None

    @property
    def admin_headers(self) -> dict[str, str]:
        """The header that opens the model-repository API (explicit model control), else none."""
        return {ADMIN_HEADER: self.admin_key} if self.admin_key else {}

    @property
    def admin_grpc_headers(self) -> dict[str, str]:
        """The same for gRPC clients (tritonclient.grpc: headers=...)."""
        return {GRPC_ADMIN_HEADER: self.admin_key} if self.admin_key else {}

    def repository_index(self) -> list[dict]:
        req = urllib.request.Request(
            self.http_url + "/v2/repository/index",
            data=b"{}",
            method="POST",
            headers={"Content-Type": "application/json", **self.admin_headers},
        )
        try:
            with urllib.request.urlopen(req, timeout=5) as r:
                return json.loads(r.read() or b"[]")
        except (OSError, ValueError):
            return []

    def server_metadata(self) -> dict:
        try:
            with urllib.request.urlopen(self.http_url + "/v2", timeout=5) as r:
                return json.loads(r.read() or b"{}")
        except (OSError, ValueError):
            return {}

    def model_ready(self, name: str) -> bool:
        return self._get(f"/v2/models/{name}/ready") == 200

    def read_log(self) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        return self.log_path.read_text(errors="replace")


def stop_together(servers: Iterable["TritonServer"], at_once: bool = False) -> None:
    """Stop several servers at once (each waits up to its own exit timeout for its stubs): a compile that serves
    the speculative and the baseline repository is stopped in the time of one, not the sum of both. at_once:
    SIGKILL without waiting for requests in flight (what remains is removed all the same)."""
    import threading

    timeout_s = 0 if at_once else None
    stoppers = [
        threading.Thread(target=server.stop, args=(timeout_s,), name=f"stop-{server.tag}") for server in servers
    ]
    for thread in stoppers:
        thread.start()
    for thread in stoppers:
        thread.join()


class _PortTaken(Exception):
    pass


def _stop_process(proc: subprocess.Popen, tag: str, timeout_s: float) -> None:
    """Stop a server and remove what it leaves: its python stubs, its /dev/shm regions."""
    try:
        _terminate(proc, timeout_s)
    finally:
        children.stop_leftovers(tag)


def _terminate(proc: subprocess.Popen, timeout_s: float) -> None:
    """Stop a server this module started: SIGINT to its PID; after `timeout_s`, SIGKILL to it and to its own
    process group (it was started in a new session, so the group holds only the server and its python stubs).
    timeout_s 0: SIGKILL at once."""
    if proc.poll() is not None:
        return
    if timeout_s > 0:
        try:
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=timeout_s)
            return
        except subprocess.TimeoutExpired:
            pass
        except ProcessLookupError:
            return
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the group is still alive while the leader is: its id is ours
    except (ProcessLookupError, PermissionError):
        proc.kill()
    proc.wait(timeout=10)


def _ensemble_steps(config: Path) -> list[str]:
    try:
        text = config.read_text()
    except OSError:
        return []
    if 'platform: "ensemble"' not in text:
        return []
    return sorted(set(re.findall(r'model_name:\s*"([^"]+)"', text)))
