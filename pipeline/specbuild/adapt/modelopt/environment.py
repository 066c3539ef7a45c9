"""The virtual environment NVIDIA Model-Optimizer runs in, made once on demand in specbuild's cache dir.

    env = ensure_environment(None, progress)         # $SPECBUILD_CACHE_DIR/modelopt/venv-<key>, made when absent
    env = ensure_environment(Path("/opt/mo/bin/python"), progress)   # adapt.modelopt_python: a ready environment

Why its own environment: PyPI `nvidia-modelopt[hf]` pins transformers < 5.15 (setup of nvidia-modelopt 0.47.0), which
would downgrade the transformers every other part of specbuild runs on. The environment is made with
`python -m venv --system-site-packages` and, when specbuild itself runs in a virtual environment, a `.pth` file naming
that environment's site-packages: it sees the local CPU torch and reuses it (no multi-GB CUDA wheel), while what pip
installs into it (transformers 5.14, modelopt and their other pins) comes first on its path and shadows the parent's.
pip runs with a constraints file pinning torch to the version installed here, so it never replaces it; the probe
after the install checks that torch is still the parent's.

Made beside its place and renamed into it (specbuild.files.atomic): a half-made environment (pip failed, Ctrl-C, a
full disk) is removed, never used. A lock file keeps two specbuild processes from making it at once. The pip log is
kept beside it (`venv-<key>.log`) so that a failure can name it.

Its key: the requirement, this Python's version and the torch it reuses (another torch makes another environment)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shlex
import signal
import site
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from specbuild.errors import UserError
from specbuild.files.atomic import atomic_folder
from specbuild.processes import children
from specbuild.serve.binary import cache_dir

Progress = Callable[[str], None]

# The release whose API specbuild's worker was written against and run with (adapt/modelopt/worker.py): its EAGLE-3
# convert, offline training forward and export (modelopt/torch/speculative/plugins/hf_eagle.py,
# modelopt/torch/export/plugins/hf_spec_export.py of nvidia-modelopt 0.47.0).
MODELOPT_VERSION = "0.47.0"
REQUIREMENT = f"nvidia-modelopt[hf]=={MODELOPT_VERSION}"
READY = "specbuild-modelopt.json"  # written last: an environment without it is half made
CONSTRAINTS = "specbuild-constraints.txt"
PARENT_PTH = "specbuild-parent.pth"
PROBE = (
    "import json, importlib.metadata as m\n"
    "def v(d):\n"
    "    try:\n"
    "        return m.version(d)\n"
    "    except m.PackageNotFoundError:\n"
    "        return None\n"
    "print(json.dumps({d: v(d) for d in ('nvidia-modelopt', 'transformers', 'torch')}))\n"
)


@dataclass(frozen=True)
class ModelOptEnvironment:
    python: Path
    versions: dict  # {"nvidia-modelopt", "transformers", "torch"}: what the environment holds

    def describe(self) -> str:
        v = self.versions
        return (
            f"nvidia-modelopt {v.get('nvidia-modelopt')} (transformers {v.get('transformers')}, torch "
            f"{v.get('torch')}) in {self.python.parent.parent}"
        )


def torch_version() -> str:
    import torch

    return str(torch.__version__)


def environments_root() -> Path:
    return cache_dir() / "modelopt"


def environment_key() -> str:
    data = json.dumps([REQUIREMENT, sys.version_info[:3], torch_version(), sys.prefix]).encode()
    return hashlib.sha256(data).hexdigest()[:12]


def python_of(venv: Path) -> Path:
    return venv / "bin" / "python"


def site_packages(venv: Path) -> Path:
    return Path(sysconfig.get_path("purelib", vars={"base": str(venv), "platbase": str(venv)}))


def parent_site_packages() -> list[str]:
    """The site-packages of the virtual environment specbuild runs in ([] outside one: --system-site-packages
    already shows the interpreter's own)."""
    if sys.prefix == sys.base_prefix:
        return []
    return [p for p in site.getsitepackages() if Path(p).is_dir()]


# The two commands an environment is made with (tests replace them with fakes: tests/adapt/test_modelopt_env.py)
def venv_command(folder: Path) -> list[str]:
    return [sys.executable, "-m", "venv", "--system-site-packages", str(folder)]


def pip_command(python: Path, constraints: Path) -> list[str]:
    return [str(python), "-m", "pip", "install", "--no-input", "--constraint", str(constraints), REQUIREMENT]


def probe(python: Path) -> dict:
    """What the environment at `python` holds (distribution versions; None when absent). UserError when it
    cannot be run."""
    try:
        done = subprocess.run([str(python), "-c", PROBE], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise UserError(f"adapt.modelopt_python {python}: cannot run it ({e})") from None
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise UserError(f"adapt.modelopt_python {python}: it failed to report its packages ({tail[0]})")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _check(versions: dict, python: Path, made_by_us: bool) -> None:
    if not versions.get("nvidia-modelopt"):
        raise UserError(
            f"adapt.modelopt_python {python}: nvidia-modelopt is not installed there — run "
            f"`{python} -m pip install '{REQUIREMENT}'`, or leave adapt.modelopt_python out and specbuild makes "
            "its own environment"
        )
    if made_by_us and versions.get("torch") != torch_version():
        raise UserError(
            f"the Model-Optimizer environment at {python.parent.parent} holds torch {versions.get('torch')}, not this "
            f"installation's {torch_version()} (pip replaced it despite the constraint) — remove that folder and run "
            "again"
        )


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _run_logged(argv: list[str], log: Path, say: Progress, what: str) -> int:
    """Run argv (a child of specbuild: children.spawn), its output appended to `log`; pip's own progress lines
    are passed on. Stopped with its process group on an interrupt."""
    with open(log, "a") as out:
        out.write(f"$ {shlex.join(argv)}\n")
        out.flush()
        tag = children.new_tag()
        proc = children.spawn(argv, tag=tag, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                out.write(line)
                text = line.strip()
                if text.startswith(("Collecting ", "Downloading ", "Installing collected", "Successfully installed")):
                    say(f"{what}: {text[:150]}")
            return proc.wait()
        except BaseException:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
        finally:
            children.stop_leftovers(tag)


def make_environment(venv: Path, say: Progress) -> dict:
    """Make the environment at `venv` (beside it, then renamed into place). Returns what it holds."""
    log = venv.with_name(venv.name + ".log")
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("")
    say(f"modelopt: making its virtual environment (once): {venv} (log: {log})")
    with atomic_folder(venv) as tmp:
        code = _run_logged(venv_command(tmp), log, say, "venv")
        if code != 0:
            raise UserError(
                f"adapt.trainer modelopt: `{shlex.join(venv_command(venv))}` failed (exit {code}); see {log} — "
                "install Python's venv module (e.g. the python3-venv package), or make an environment with "
                f"'{REQUIREMENT}' yourself and name its python in adapt.modelopt_python"
            )
        parents = parent_site_packages()
        if parents:
            packages = site_packages(tmp)
            packages.mkdir(parents=True, exist_ok=True)
            (packages / PARENT_PTH).write_text("".join(p + "\n" for p in parents))
        constraints = tmp / CONSTRAINTS
        constraints.write_text(f"torch=={torch_version()}\n")
        pip = pip_command(python_of(tmp), constraints)
        code = _run_logged(pip, log, say, "pip")
        if code != 0:
            shown = pip_command(python_of(venv), venv / CONSTRAINTS)
            raise UserError(
                f"adapt.trainer modelopt: pip could not install {REQUIREMENT} into its environment (exit {code}): "
                f"`{shlex.join(shown)}`; its log: {log} — check that PyPI is reachable from here (network, proxy, "
                "PIP_INDEX_URL), or make an environment with it yourself (python -m venv --system-site-packages) and "
                "name its python in adapt.modelopt_python; no half-made environment was kept"
            )
        versions = probe(python_of(tmp))
        _check(versions, python_of(tmp), made_by_us=True)
        (tmp / READY).write_text(json.dumps({"requirement": REQUIREMENT, "versions": versions}, indent=2) + "\n")
    return versions


def ensure_environment(python: Path | None, say: Progress | None = None) -> ModelOptEnvironment:
    """The environment to run Model-Optimizer in: `python` (adapt.modelopt_python) when given, else specbuild's
    own, made now when it is not there. UserError (with the pip command and its log) when it cannot be made."""
    say = say or (lambda _m: None)
    if python is not None:
        python = Path(python).expanduser().absolute()
        versions = probe(python)
        _check(versions, python, made_by_us=False)
        return ModelOptEnvironment(python, versions)
    root = environments_root()
    venv = root / f"venv-{environment_key()}"
    with _locked(root / f".venv-{environment_key()}.lock"):
        if (venv / READY).is_file():
            ready = json.loads((venv / READY).read_text())
            return ModelOptEnvironment(python_of(venv), ready["versions"])
        versions = make_environment(venv, say)
    return ModelOptEnvironment(python_of(venv), versions)
