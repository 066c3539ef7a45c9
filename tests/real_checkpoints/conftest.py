"""The real-layout checkpoints (built once per test process) and a GPU machine of TensorRT-LLM doubles."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from real_checkpoints.builder import build_all

REPO = Path(__file__).resolve().parents[2]
DOUBLES = REPO / "tests" / "doubles"


@pytest.fixture(scope="session")
def real(tmp_path_factory):
    return build_all(tmp_path_factory.mktemp("real") / "models")


def _launcher(path: Path, body: str) -> None:
    path.write_text(f"#!{sys.executable}\n{body}")
    path.chmod(0o755)


@pytest.fixture
def gpu(tmp_path, monkeypatch):
    """trtllm-build, nvidia-smi (one H200) and the tensorrt_llm package as the doubles in tests/doubles, as
    tests/trtllm/conftest.py sets them up; HF_HUB_CACHE empty unless a test points it at a hub."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _launcher(bin_dir / "trtllm-build", "from tensorrt_llm.commands.build import main\nmain()\n")
    _launcher(
        bin_dir / "nvidia-smi",
        f"import runpy\nrunpy.run_path({str(DOUBLES / 'nvidia_smi.py')!r}, run_name='__main__')\n",
    )
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}/usr/bin{os.pathsep}/bin")
    monkeypatch.setenv("PYTHONPATH", f"{REPO / 'pipeline'}{os.pathsep}{DOUBLES}")
    monkeypatch.setenv("SPECBUILD_TRTLLM_DOUBLE", "1")
    monkeypatch.setenv("SPECBUILD_DOUBLE_GPUS", "NVIDIA H200,9.0")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hub-cache"))
    for knob in (
        "SPECBUILD_DOUBLE_TRTLLM_VERSION",
        "SPECBUILD_DOUBLE_FAULT",
        "SPECBUILD_DOUBLE_DROP_FLAGS",
        "SPECBUILD_DOUBLE_BUILD_SECONDS",
        "SPECBUILD_DOUBLE_PID_FILE",
        "SPECBUILD_DOUBLE_CALL_LOG",
    ):
        monkeypatch.delenv(knob, raising=False)
    monkeypatch.syspath_prepend(str(DOUBLES))
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def recipe_file(tmp_path):
    """recipe_file(name, **sections) -> a recipe on the tensorrt-llm runtime (JSON is YAML)."""

    def write(name: str, **sections) -> Path:
        recipe = {"name": name, "runtime": "tensorrt-llm", "validation": {"max_tokens": 16}, **sections}
        path = tmp_path / f"{name}.yaml"
        path.write_text(json.dumps(recipe, indent=2, default=str))
        return path

    return write
