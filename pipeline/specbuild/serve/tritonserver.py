"""Start, watch and stop a real tritonserver (a system one, or the CPU build in the nvidia-pytriton wheel).

    binary = find_tritonserver(None)            # --tritonserver PATH, /opt/tritonserver, PATH, else nvidia-pytriton
    with TritonServer(Path("triton_repo/demo"), binary=binary) as server:   # free loopback ports
        server.http_url, server.grpc_url, server.metrics_url

`start()` returns once the server is live and every model it should load reports ready on its own
`/v2/models/<name>/ready` endpoint. When it is not, it raises `UserError` with each model's load error in plain
words and the log path. `stop()` stops the server by its own PID (SIGINT, then SIGKILL after a timeout).
Standard library only: importing this module is cheap.

PYTHONPATH: the environment of the server carries PYTHONPATH with the folder holding the `specbuild` package
first, but the python backend stub's embedded interpreter does not read PYTHONPATH (checked with tritonserver
2.51): a model.py that imports specbuild adds the variable's entries to sys.path itself (ours does).
"""

from __future__ import annotations

import atexit
import importlib.util
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
import urllib.error
import urllib.request
import uuid
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Sequence

from specbuild.errors import UserError

SYSTEM_TRITONSERVER = Path("/opt/tritonserver/bin/tritonserver")


# --- finding a server binary ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class ServerBinary:
    """A tritonserver executable and how to run it."""

    path: Path
    source: str  # "explicit" (--tritonserver), "system" (/opt/tritonserver), "PATH", or "nvidia-pytriton"
    backend_dir: Path | None = None  # --backend-directory; None: the server's default (/opt/tritonserver/backends)
    env: dict[str, str] = field(default_factory=dict)  # variables set on top of os.environ

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(self.env)
        return env

    def describe(self) -> str:
        return f"{self.path} ({self.source})"


def specbuild_source_root() -> Path:
    """The folder holding the `specbuild` package (put on PYTHONPATH so python models can import it)."""
    return Path(__file__).resolve().parent.parent.parent


def cache_dir() -> Path:
    root = os.environ.get("SPECBUILD_CACHE_DIR")
    if root:
        return Path(root)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "specbuild"


def _prepend(path: str, existing: str | None) -> str:
    return path if not existing else f"{path}{os.pathsep}{existing}"


def _python_env(env: dict[str, str]) -> dict[str, str]:
    env = dict(env)
    env["PYTHONPATH"] = _prepend(str(specbuild_source_root()), env.get("PYTHONPATH") or os.environ.get("PYTHONPATH"))
    return env


def _executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def find_tritonserver(explicit: Path | None = None) -> ServerBinary:
    """The tritonserver to run: `explicit` (--tritonserver), /opt/tritonserver/bin/tritonserver, one on PATH,
    else the CPU build in the nvidia-pytriton wheel (backends copied to a cache folder with this Python's stub)."""
    if explicit is not None:
        path = Path(explicit).expanduser()
        if not _executable(path):
            raise UserError(f"--tritonserver {explicit}: no executable file there — give the path of a tritonserver "
                            "binary, or leave the option out to use a system one or nvidia-pytriton's")
        return ServerBinary(path.resolve(), "explicit", env=_python_env({}))
    if _executable(SYSTEM_TRITONSERVER):
        return ServerBinary(SYSTEM_TRITONSERVER, "system", env=_python_env({}))
    on_path = shutil.which("tritonserver")
    if on_path:
        return ServerBinary(Path(on_path).resolve(), "PATH", env=_python_env({}))
    return bundled_tritonserver()


def bundled_tritonserver() -> ServerBinary:
    """nvidia-pytriton's tritonserver, set up to run python models with this interpreter's packages
    (triton-on-cpu fact sheet §0)."""
    spec = importlib.util.find_spec("pytriton")
    if spec is None or not spec.submodule_search_locations:
        raise UserError("no tritonserver found: none at /opt/tritonserver/bin/tritonserver or on PATH, and the "
                        "nvidia-pytriton wheel is not installed — pip install 'nvidia-pytriton>=0.7,<0.8' "
                        "(pip install 'specbuild[triton]'), or pass --tritonserver PATH")
    package = Path(list(spec.submodule_search_locations)[0])
    dist = package / "tritonserver"
    binary = dist / "bin" / "tritonserver"
    libs = package.parent / "nvidia_pytriton.libs"
    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    stub = dist / "python_backend_stubs" / version / "triton_python_backend_stub"
    if not _executable(binary):
        raise UserError(f"the nvidia-pytriton wheel at {package} has no tritonserver binary ({binary}) — "
                        "reinstall nvidia-pytriton, or pass --tritonserver PATH")
    if not stub.is_file():
        raise UserError(f"nvidia-pytriton has no python backend stub for Python {version} ({stub}) — run specbuild "
                        "with a Python that nvidia-pytriton supports (3.8-3.13), or pass --tritonserver PATH")
    backends = _cached_backends(dist / "backends", stub, _wheel_version())
    env = {"LD_LIBRARY_PATH": str(libs)}
    libdir, soname = sysconfig.get_config_var("LIBDIR"), sysconfig.get_config_var("INSTSONAME")
    if libdir and soname and (Path(libdir) / soname).exists():
        # the stub links libpython<ver>.so.1.0; prefer the one of the interpreter whose packages it will use
        env["LD_LIBRARY_PATH"] += os.pathsep + libdir
    env["LD_LIBRARY_PATH"] = _prepend(env["LD_LIBRARY_PATH"], os.environ.get("LD_LIBRARY_PATH"))
    # The stub takes its Python prefix from the first python3 on PATH: this interpreter's bin folder first.
    bin_dir = Path(sys.prefix) / "bin"
    if not (bin_dir / "python3").exists():
        bin_dir = Path(sys.executable).parent
    env["PATH"] = _prepend(str(bin_dir), os.environ.get("PATH"))
    return ServerBinary(binary, "nvidia-pytriton", backend_dir=backends, env=_python_env(env))


def _wheel_version() -> str:
    from importlib import metadata

    try:
        return metadata.version("nvidia-pytriton")
    except metadata.PackageNotFoundError:
        return "unknown"


def _cached_backends(source: Path, stub: Path, wheel_version: str) -> Path:
    """A copy of the wheel's backends folder with the python stub for this Python, made once per version
    (in the specbuild cache, or a temp folder when the cache is not writable). Never replaces a complete copy
    that another process may be using."""
    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    try:
        return _copy_backends(cache_dir() / f"tritonserver-{wheel_version}-py{version}", source, stub)
    except OSError:
        return _copy_backends(Path(tempfile.mkdtemp(prefix="specbuild-tritonserver-")), source, stub)


def _copy_backends(root: Path, source: Path, stub: Path) -> Path:
    backends = root / "backends"
    target_stub = backends / "python" / "triton_python_backend_stub"

    def complete() -> bool:
        return target_stub.is_file() and target_stub.stat().st_size == stub.stat().st_size

    if complete():
        return backends
    root.mkdir(parents=True, exist_ok=True)
    partial = root / f".backends.partial-{os.getpid()}"
    shutil.rmtree(partial, ignore_errors=True)
    try:
        shutil.copytree(source, partial, ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copy2(stub, partial / "python" / "triton_python_backend_stub")
        if not complete():
            shutil.rmtree(backends, ignore_errors=True)  # an unfinished or outdated copy
            os.replace(partial, backends)
    except OSError:
        if not complete():  # another process finished first otherwise
            raise
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return backends


# --- ports ----------------------------------------------------------------------------------------------------

def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago (the server may still lose a race; `start` then retries)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def port_in_use(host: str, port: int) -> bool:
    """True when something listens on host:port. tritonserver binds with SO_REUSEPORT, so a second server on a
    taken port starts without an error and shares the port with the first: check before starting."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # ignore TIME_WAIT leftovers of a stopped server
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


def _free_ports(host: str, count: int) -> list[int]:
    socks = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((host, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


# --- reading the server's log ---------------------------------------------------------------------------------

_FAILED_LOAD = re.compile(r"failed to load '(?P<model>[^']+)' version (?P<version>\d+): (?P<reason>.*)")
_TABLE_ROW = re.compile(r"^\|\s*(?P<model>[^|\s]+)\s*\|\s*(?P<version>[^|\s]*)\s*\|\s*(?P<status>.*?)\s*\|\s*$")
_LOG_PREFIX = re.compile(r"^[IWE]\d{4} \d\d:\d\d:\d\d\.\d+ \d+ [\w.]+:\d+\] ")
_ADDRESS_IN_USE = ("address already in use", "failed to start", "Address already in use")


def _strip_prefix(line: str) -> str:
    return _LOG_PREFIX.sub("", line).strip().strip('"')


def load_errors_from_log(text: str) -> dict[str, str]:
    """Each model's load error, from the server log: the 'failed to load' lines, else the startup table."""
    errors: dict[str, str] = {}
    lines = text.splitlines()
    for i, line in enumerate(lines):
        m = _FAILED_LOAD.search(_strip_prefix(line))
        if not m:
            continue
        reason = m.group("reason").strip().strip('"')
        # A python traceback continues on the following lines, up to the next log record.
        j = i + 1
        while j < len(lines) and not _LOG_PREFIX.match(lines[j]) and not lines[j].startswith(("+", "|")):
            reason += "\n" + lines[j].rstrip()
            j += 1
        errors[m.group("model")] = reason.strip().strip('"').strip()
    for line in lines:
        m = _TABLE_ROW.match(line.strip())
        if not m or m.group("model") in ("Model", "Backend", "Option") or m.group("model") in errors:
            continue
        status = m.group("status")
        if status.startswith("UNAVAILABLE"):
            errors[m.group("model")] = status.split(":", 1)[1].strip() if ":" in status else status
    return errors


def plain_reason(reason: str) -> str:
    """A load error made short: the last exception line of a python traceback, else the message itself."""
    text = reason.replace("\\n", "\n").strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if not lines:
        return "unknown error"
    if len(lines) > 1 and any("Traceback" in ln for ln in lines):
        # last line that looks like "SomeError: message"
        for ln in reversed(lines):
            if re.match(r"^[\w.]+(Error|Exception|Exit|Interrupt)\b", ln):
                return ln
    first = lines[0]
    return first if len(first) < 400 else first[:397] + "..."


def _hint(reason: str) -> str:
    if "unable to find backend library for backend 'tensorrtllm'" in reason:
        return " (this server has no TensorRT-LLM backend: serve the GPU repository in an NGC tritonserver " \
               "trtllm container, or load only the python models with explicit model control)"
    if "No module named" in reason:
        return " (python models run with the Python whose bin folder is first on the server's PATH, and its stub " \
               "ignores PYTHONPATH: install the missing package into that Python)"
    return ""


# --- the server -----------------------------------------------------------------------------------------------

class TritonServer:
    """A tritonserver process serving one model repository on loopback ports."""

    def __init__(self, repository: Path, *, host: str = "127.0.0.1", http_port: int | None = None,
                 grpc_port: int | None = None, metrics_port: int | None = None,
                 binary: ServerBinary | Path | str | None = None,
                 model_control: str = "none", load_models: Sequence[str] | None = None,
                 log_path: Path | None = None, exit_timeout_s: int = 5, extra_args: Iterable[str] = (),
                 log_verbose: int = 0, launcher: Path | None = None):
        """launcher: a repository's launch_triton.sh (GPU repositories: mpirun ranks, orchestrator mode); it
        takes the ports from HTTP_PORT/GRPC_PORT/METRICS_PORT and passes our other arguments to rank 0."""
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
        self.log_path = Path(log_path) if log_path else None
        self.exit_timeout_s = int(exit_timeout_s)
        self.extra_args = list(extra_args)
        self.log_verbose = log_verbose
        self.launcher = Path(launcher) if launcher else None
        self.server_id = f"specbuild-{uuid.uuid4().hex[:12]}"  # GET /v2 names it: proves we talk to our server
        self.process: subprocess.Popen | None = None
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
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def argv(self) -> list[str]:
        b = self.binary
        if self.launcher is not None:  # the script names the repository and the ports itself
            argv = ["bash", str(self.launcher)]
        else:
            argv = [str(b.path), "--model-repository", str(self.repository)]
            if b.backend_dir is not None:
                argv += ["--backend-directory", str(b.backend_dir)]
            argv += ["--http-port", str(self.http_port), "--grpc-port", str(self.grpc_port),
                     "--metrics-port", str(self.metrics_port)]
        argv += [
            "--http-address", self.host, "--grpc-address", self.host, "--metrics-address", self.host,
            f"--exit-timeout-secs={self.exit_timeout_s}",
            f"--log-verbose={self.log_verbose}",
            f"--id={self.server_id}",
            # A per-server shared-memory prefix, so that servers running side by side never share python stub regions.
            f"--backend-config=python,shm-region-prefix-name=specbuild_{os.getpid()}_{uuid.uuid4().hex[:8]}_",
        ]
        if self.model_control == "explicit":
            argv.append("--model-control-mode=explicit")
            argv += [f"--load-model={m}" for m in self.load_models]
        return argv + self.extra_args

    # lifecycle ---------------------------------------------------------------------------------------------
    def start(self, timeout_s: float = 180.0, progress: Callable[[str], None] | None = None) -> "TritonServer":
        """Start the server and wait until it is live and every model it loads is ready."""
        if self.running():
            return self
        if not self.repository.is_dir():
            raise UserError(f"model repository {self.repository} does not exist — write it first "
                            "(specbuild compile) or give the path of a Triton model repository")
        attempts = 3 if None in self._requested_ports else 1
        for attempt in range(attempts):
            try:
                self._launch()
                self._wait_ready(timeout_s, progress)
                return self
            except _PortTaken:
                self.stop()
                if attempt == attempts - 1:
                    raise UserError(f"tritonserver could not bind its ports ({self.http_port}, {self.grpc_port}, "
                                    f"{self.metrics_port}) — choose other ports; log: {self.log_path}") from None
            except BaseException:
                self.stop()
                raise
        return self

    def _launch(self) -> None:
        free = iter(_free_ports(self.host, 3))
        self.http_port, self.grpc_port, self.metrics_port = (p if p is not None else next(free)
                                                             for p in self._requested_ports)
        for what, port in (("--http-port", self.http_port), ("--grpc-port", self.grpc_port),
                           ("--metrics-port", self.metrics_port)):
            if port_in_use(self.host, port):
                if None in self._requested_ports and port not in self._requested_ports:
                    raise _PortTaken()
                raise UserError(f"{what} {port}: the port is already in use on {self.host} (another tritonserver?) "
                                "— stop that server or choose another port")
        if self.log_path is None:
            fd, name = tempfile.mkstemp(prefix="tritonserver-", suffix=".log")
            os.close(fd)
            self.log_path = Path(name)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log_file = open(self.log_path, "wb")
        env = self.binary.environment()
        if self.launcher is not None:
            env.update(TRITONSERVER=str(self.binary.path), HTTP_PORT=str(self.http_port),
                       GRPC_PORT=str(self.grpc_port), METRICS_PORT=str(self.metrics_port))
        self.process = subprocess.Popen(self.argv(), stdout=self._log_file, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        self._finalizer = weakref.finalize(self, _terminate, self.process, self.exit_timeout_s + 10)
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
        while time.monotonic() < deadline:
            if not self.running():
                self._fail("tritonserver exited during startup")
            for name in sorted(pending):
                if self._get(f"/v2/models/{name}/ready") == 200:
                    pending.discard(name)
            if not pending:
                return
            index = self.repository_index()
            failed = {e["name"]: e.get("reason", "") for e in index
                      if e.get("name") in pending and e.get("state") == "UNAVAILABLE" and e.get("reason")}
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
            lines.append(f"  model {model}: {short}{_hint(short)}")
        if not errors:
            tail = [ln for ln in log.splitlines() if ln.startswith("E") or "error" in ln.lower()][-5:]
            lines += ["  " + _strip_prefix(ln) for ln in tail]
        if any(s in log for s in _ADDRESS_IN_USE) and "failed to load" not in log and None in self._requested_ports:
            raise _PortTaken()
        lines.append(f"  full log: {self.log_path}")
        raise UserError("\n".join(lines))

    def stop(self, timeout_s: float | None = None) -> int | None:
        """Stop the server by its PID: SIGINT, then SIGKILL (its process group) after `timeout_s`."""
        proc = self.process
        if proc is None:
            return None
        _terminate(proc, timeout_s if timeout_s is not None else self.exit_timeout_s + 10)
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

    def repository_index(self) -> list[dict]:
        req = urllib.request.Request(self.http_url + "/v2/repository/index", data=b"{}", method="POST",
                                     headers={"Content-Type": "application/json"})
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


class _PortTaken(Exception):
    pass


def _terminate(proc: subprocess.Popen, timeout_s: float) -> None:
    """Stop a server this module started: SIGINT to its PID; after `timeout_s`, SIGKILL to it and to its own
    process group (it was started in a new session, so the group holds only the server and its python stubs)."""
    if proc.poll() is not None:
        return
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
