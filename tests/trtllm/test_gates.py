"""Before anything runs: TensorRT-LLM present and in range, and a GPU of compute capability >= 8.0."""

from __future__ import annotations

import pytest

from specbuild.errors import UserError
from specbuild.trtllm import gpus, version


@pytest.mark.parametrize(
    "text, release, ok",
    [
        ("0.16.0", (0, 16), False),
        ("0.17.0", (0, 17), True),
        ("0.17.0.post1", (0, 17), True),
        ("0.18.2", (0, 18), True),
        ("1.0.0", (1, 0), True),
        ("1.2.0rc6", (1, 2), True),
        ("1.2.1", (1, 2), True),
        ("1.3.0rc0", (1, 3), True),
        ("1.3.0rc20", (1, 3), True),
        ("1.3.0rc21", (1, 3), False),
        ("1.3.0", (1, 3), False),
        ("2.0.0", (2, 0), False),
    ],
)
def test_version_range(text, release, ok):
    assert version.parse_release(text) == release
    assert version.version_supported(text) is ok


def test_missing_tensorrt_llm():
    # The doubles are not on sys.path here (no `machine` fixture), and the wheel is not installed on CPU machines.
    if version.importlib.util.find_spec("tensorrt_llm") is not None:
        pytest.skip("a tensorrt_llm is importable in this environment")
    with pytest.raises(UserError) as e:
        version.require_trtllm()
    msg = str(e.value)
    assert "not installed" in msg and '"tensorrt_llm>=0.17,<=1.3.0rc20"' in msg
    assert "-trtllm-python-py3" in msg and "runtime: reference" in msg


def test_the_double_is_not_importable_without_the_test_switch(monkeypatch):
    import subprocess
    import sys

    from trtllm_helpers import DOUBLES

    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(DOUBLES)}
    out = subprocess.run([sys.executable, "-c", "import tensorrt_llm"], capture_output=True, text=True, env=env)
    assert out.returncode != 0 and "test double" in out.stderr


@pytest.mark.parametrize("ver, words", [("1.3.0", "removed the TensorRT engine path"), ("0.16.1", "0.17 or newer")])
def test_version_out_of_range_by_import(machine, ver, words):
    machine.set("SPECBUILD_DOUBLE_TRTLLM_VERSION", ver)
    with pytest.raises(UserError) as e:
        version.require_trtllm()
    assert f"TensorRT-LLM {ver} is installed" in str(e.value) and words in str(e.value)
    assert '"tensorrt_llm>=0.17,<=1.3.0rc20"' in str(e.value)


def test_version_from_distribution_metadata(machine, tmp_path, monkeypatch):
    site = tmp_path / "site"
    dist = site / "tensorrt_llm-1.4.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: tensorrt_llm\nVersion: 1.4.0\n")
    monkeypatch.syspath_prepend(str(site))
    found = version.installed()
    assert (found.version, found.origin, found.supported) == ("1.4.0", "metadata", False)
    with pytest.raises(UserError, match="1.4.0 is installed"):
        version.require_trtllm()


def test_version_by_import_reports_the_double(machine):
    found = version.require_trtllm()
    assert (found.version, found.origin) == ("1.2.0", "import")


def test_nvidia_smi_output_is_parsed():
    text = "NVIDIA H200, 9.0\nNVIDIA A100-SXM4-80GB, 8.0\n"
    assert [(g.index, g.name, g.compute_capability) for g in gpus.parse_nvidia_smi(text)] == [
        (0, "NVIDIA H200", (9, 0)),
        (1, "NVIDIA A100-SXM4-80GB", (8, 0)),
    ]


def test_gpus_found(machine):
    machine.set("SPECBUILD_DOUBLE_GPUS", "NVIDIA H200,9.0;NVIDIA H200,9.0")
    assert [str(g) for g in gpus.require_gpus()] == [
        "GPU 0: NVIDIA H200 (compute capability 9.0)",
        "GPU 1: NVIDIA H200 (compute capability 9.0)",
    ]


@pytest.mark.parametrize(
    "setting, words",
    [
        ("none", "couldn't communicate with the NVIDIA driver"),
        ("empty", "No devices were found"),
    ],
)
def test_no_gpu(machine, setting, words):
    machine.set("SPECBUILD_DOUBLE_GPUS", setting)
    with pytest.raises(UserError) as e:
        gpus.require_gpus()
    assert "none was found" in str(e.value) and words in str(e.value) and "runtime: reference" in str(e.value)


def test_no_nvidia_smi_and_no_cuda(machine):
    (machine.bin / "nvidia-smi").unlink()
    with pytest.raises(UserError, match="none was found"):
        gpus.require_gpus(torch_fallback=False)


def test_old_gpu_is_refused(machine):
    machine.set("SPECBUILD_DOUBLE_GPUS", "Tesla T4,7.5")
    with pytest.raises(UserError, match=r"Tesla T4 \(compute capability 7.5\).*8.0 or newer"):
        gpus.require_gpus()


def test_driver_without_compute_cap_field(machine):
    machine.set("SPECBUILD_DOUBLE_GPUS", "old-driver:NVIDIA A100,8.0")
    found = gpus.require_gpus()
    assert [(g.name, g.compute_capability) for g in found] == [("NVIDIA A100", None)]


def test_no_gpu_stops_compile_before_converting(machine, write_recipe, compile_engines):
    machine.set("SPECBUILD_DOUBLE_GPUS", "none")
    with pytest.raises(UserError, match="none was found"):
        compile_engines(write_recipe("none"))
    assert not (machine.root / "engines").exists()


def test_out_of_range_version_stops_compile(machine, write_recipe, compile_engines):
    machine.set("SPECBUILD_DOUBLE_TRTLLM_VERSION", "1.3.0")
    with pytest.raises(UserError, match="1.3.0"):
        compile_engines(write_recipe("none"))
    assert not (machine.root / "engines").exists()
