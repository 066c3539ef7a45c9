"""The Model-Optimizer environment specbuild makes on demand (specbuild.adapt.modelopt.environment), with a fake venv
and a fake pip (nothing is downloaded): the real commands' shape, the constraints file pinning this torch, the parent
environment's site-packages named, atomicity (a failed or interrupted install leaves nothing, the next run starts
clean), reuse, and the messages."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from specbuild.adapt.modelopt import environment as env_mod
from specbuild.errors import UserError

FAKE_VENV = """\
import os, sys
from pathlib import Path
folder = Path(sys.argv[1])
(folder / "bin").mkdir(parents=True, exist_ok=True)
(folder / "site").mkdir(exist_ok=True)
python = folder / "bin" / "python"
python.write_text('#!/bin/sh\\nHERE="$(dirname "$0")/.."\\nexport PYTHONPATH="$HERE/site"\\nexec {exe} "$@"\\n')
python.chmod(0o755)
"""

FAKE_PIP = """\
import json, os, sys, time
from pathlib import Path
python, constraints, requirement = sys.argv[1], sys.argv[2], sys.argv[3]
venv = Path(python).parent.parent
mode = os.environ["FAKE_PIP_MODE"]
record = Path(os.environ["FAKE_PIP_RECORD"])
with record.open("a") as f:
    f.write(json.dumps({"python": python, "constraints": Path(constraints).read_text(), "requirement": requirement,
                        "pid": os.getpid(), "mode": mode}) + "\\n")
def dist(name, version):
    d = venv / "site" / f"{name}-{version}.dist-info"
    d.mkdir(parents=True)
    (d / "METADATA").write_text(f"Metadata-Version: 2.1\\nName: {name}\\nVersion: {version}\\n")
print(f"Collecting {requirement}", flush=True)
if mode == "offline":
    (venv / "site" / "half_installed.py").write_text("")
    print("ERROR: Could not find a version that satisfies the requirement " + requirement, flush=True)
    sys.exit(1)
if mode == "hang":
    time.sleep(120)
dist("nvidia_modelopt", "0.47.0")
dist("transformers", "5.14.1")
if mode == "replace-torch":
    dist("torch", "9.9.9")
print("Successfully installed nvidia-modelopt-0.47.0 transformers-5.14.1", flush=True)
"""


@pytest.fixture
def fakes(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECBUILD_CACHE_DIR", str(tmp_path / "cache"))
    venv_script, pip_script = tmp_path / "fake_venv.py", tmp_path / "fake_pip.py"
    venv_script.write_text(FAKE_VENV.replace("{exe}", sys.executable))
    pip_script.write_text(FAKE_PIP)
    record = tmp_path / "pip.jsonl"
    monkeypatch.setenv("FAKE_PIP_RECORD", str(record))
    monkeypatch.setattr(env_mod, "venv_command", lambda folder: [sys.executable, str(venv_script), str(folder)])
    monkeypatch.setattr(
        env_mod,
        "pip_command",
        lambda python, constraints: [
            sys.executable,
            str(pip_script),
            str(python),
            str(constraints),
            env_mod.REQUIREMENT,
        ],
    )

    def runs() -> list[dict]:
        return [json.loads(x) for x in record.read_text().splitlines()] if record.is_file() else []

    return {"root": tmp_path / "cache" / "modelopt", "runs": runs}


def leftovers(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if p.name.startswith(".venv-") and not p.name.endswith(".lock"))


def test_the_real_commands_reuse_this_torch_and_pin_it():
    venv = env_mod.venv_command(Path("/x/venv"))
    assert venv[1:] == ["-m", "venv", "--system-site-packages", "/x/venv"]
    pip = env_mod.pip_command(Path("/x/venv/bin/python"), Path("/x/venv/c.txt"))
    assert pip[:4] == ["/x/venv/bin/python", "-m", "pip", "install"]
    assert pip[pip.index("--constraint") + 1] == "/x/venv/c.txt" and pip[-1] == "nvidia-modelopt[hf]==0.47.0"


def test_made_once_with_the_constraint_then_reused(fakes, monkeypatch):
    monkeypatch.setenv("FAKE_PIP_MODE", "ok")
    said: list[str] = []
    env = env_mod.ensure_environment(None, said.append)
    assert env.versions["nvidia-modelopt"] == "0.47.0" and env.versions["transformers"] == "5.14.1"
    import torch

    assert env.versions["torch"] == torch.__version__  # the parent's torch, seen through the environment
    (run,) = fakes["runs"]()
    assert run["constraints"] == f"torch=={torch.__version__}\n"
    venv = env.python.parent.parent
    assert venv.parent == fakes["root"] and (venv / env_mod.READY).is_file() and not leftovers(fakes["root"])
    pth = env_mod.site_packages(venv) / env_mod.PARENT_PTH
    if sys.prefix != sys.base_prefix:  # specbuild runs in a virtual environment: its site-packages are named
        assert pth.read_text().splitlines() == env_mod.parent_site_packages()
        assert any((Path(p) / "torch").is_dir() for p in pth.read_text().splitlines())
    assert any("making its virtual environment" in m for m in said) and any(
        m.startswith("pip: Collecting") for m in said
    )
    again = env_mod.ensure_environment(None)
    assert again.python == env.python and len(fakes["runs"]()) == 1  # reused: pip not run again


def test_an_offline_install_leaves_nothing_and_says_what_to_do(fakes, monkeypatch):
    monkeypatch.setenv("FAKE_PIP_MODE", "offline")
    with pytest.raises(UserError) as e:
        env_mod.ensure_environment(None)
    message = str(e.value)
    venv = fakes["root"] / f"venv-{env_mod.environment_key()}"
    log = venv.with_name(venv.name + ".log")
    # the command that ran (here the fake pip), with the constraints file, at the environment's final place
    assert "fake_pip.py" in message and str(venv / env_mod.CONSTRAINTS) in message and env_mod.REQUIREMENT in message
    assert str(log) in message and "PyPI is reachable" in message and "adapt.modelopt_python" in message
    assert "Could not find a version" in log.read_text()
    assert not venv.exists() and not leftovers(fakes["root"])
    monkeypatch.setenv("FAKE_PIP_MODE", "ok")  # the next run starts clean
    again = env_mod.ensure_environment(None)
    assert (
        (again.python.parent.parent / env_mod.READY).is_file()
        and len(fakes["runs"]()) == 2
        and not (env_mod.site_packages(venv) / "half_installed.py").exists()
    )
    assert not (venv / "site" / "half_installed.py").exists()


def test_pip_replacing_torch_is_refused_and_nothing_kept(fakes, monkeypatch):
    monkeypatch.setenv("FAKE_PIP_MODE", "replace-torch")
    with pytest.raises(UserError) as e:
        env_mod.ensure_environment(None)
    assert "holds torch 9.9.9" in str(e.value)
    assert not (fakes["root"] / f"venv-{env_mod.environment_key()}").exists() and not leftovers(fakes["root"])


def test_an_interrupted_install_stops_pip_and_leaves_nothing(fakes, monkeypatch):
    monkeypatch.setenv("FAKE_PIP_MODE", "hang")

    def interrupt(message: str) -> None:
        if message.startswith("pip: Collecting"):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        env_mod.ensure_environment(None, interrupt)
    (run,) = fakes["runs"]()
    with pytest.raises(ProcessLookupError):
        os.kill(run["pid"], 0)
    assert not (fakes["root"] / f"venv-{env_mod.environment_key()}").exists() and not leftovers(fakes["root"])


def test_a_given_python_is_probed_not_made(fakes, tmp_path):
    with pytest.raises(UserError) as e:
        env_mod.ensure_environment(Path(sys.executable))
    assert "nvidia-modelopt is not installed there" in str(e.value) and "pip install" in str(e.value)
    with pytest.raises(UserError) as e:
        env_mod.ensure_environment(tmp_path / "nope" / "python")
    assert "cannot run it" in str(e.value)
    assert fakes["runs"]() == [] and not fakes["root"].exists()
