"""Which tritonserver to run: --tritonserver PATH, /opt/tritonserver, one on PATH, else the CPU build in the
nvidia-pytriton wheel (its backends copied once to a cache folder with the python stub of this interpreter).

PYTHONPATH: the environment of the server carries PYTHONPATH with the folder holding the `specbuild` package
first, but the python backend stub's embedded interpreter does not read PYTHONPATH (checked with tritonserver
2.51): a model.py that imports specbuild adds the variable's entries to sys.path itself (ours does).
Standard library only: importing this module is cheap.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import sysconfig
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from specbuild.errors import UserError

SYSTEM_TRITONSERVER = Path("/opt/tritonserver/bin/tritonserver")


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
            raise UserError(
                f"--tritonserver {explicit}: no executable file there — give the path of a tritonserver "
                "binary, or leave the option out to use a system one or nvidia-pytriton's"
            )
        return ServerBinary(path.resolve(), "explicit", env=_python_env({}))
    if _executable(SYSTEM_TRITONSERVER):
        return ServerBinary(SYSTEM_TRITONSERVER, "system", env=_python_env({}))
    on_path = shutil.which("tritonserver")
    if on_path:
        return ServerBinary(Path(on_path).resolve(), "PATH", env=_python_env({}))
    return bundled_tritonserver()


def bundled_tritonserver() -> ServerBinary:
    """nvidia-pytriton's tritonserver, set up to run python models with this interpreter's packages."""
    spec = importlib.util.find_spec("pytriton")
    if spec is None or not spec.submodule_search_locations:
        raise UserError(
            "no tritonserver found: none at /opt/tritonserver/bin/tritonserver or on PATH, and the "
            "nvidia-pytriton wheel is not installed — pip install 'nvidia-pytriton>=0.7,<0.8' "
            "(pip install 'specbuild[triton]'), or pass --tritonserver PATH"
        )
    package = Path(list(spec.submodule_search_locations)[0])
    dist = package / "tritonserver"
    binary = dist / "bin" / "tritonserver"
    libs = package.parent / "nvidia_pytriton.libs"
    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    stub = dist / "python_backend_stubs" / version / "triton_python_backend_stub"
    if not _executable(binary):
        raise UserError(
            f"the nvidia-pytriton wheel at {package} has no tritonserver binary ({binary}) — "
            "reinstall nvidia-pytriton, or pass --tritonserver PATH"
        )
    if not stub.is_file():
        raise UserError(
            f"nvidia-pytriton has no python backend stub for Python {version} ({stub}) — run specbuild "
            "with a Python that nvidia-pytriton supports (3.8-3.13), or pass --tritonserver PATH"
        )
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
