"""`specbuild doctor`: clear fails on a CPU machine, all ok on the (double) GPU machine, exit codes, --json."""

from __future__ import annotations

import json
import os

import pytest

from specbuild.cli import main


def run(capsys, *args) -> tuple[int, str]:
    try:
        code = main(["doctor", *args])
    except SystemExit as e:
        code = e.code
    return code, capsys.readouterr().out


def statuses(out: str) -> dict[str, str]:
    return {c["name"]: c["status"] for c in json.loads(out)["checks"]}


def test_cpu_machine_fails_clearly(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing on PATH: no nvidia-smi, trtllm-build, tritonserver, mpirun
    code, out = run(capsys, "--json")
    assert code == 2
    report = json.loads(out)
    assert report["ready"] is False
    got = statuses(out)
    assert got["GPU"] == got["trtllm-build"] == got["tritonserver"] == "fail"
    assert got["MPI"] == "warn"
    if got["TensorRT-LLM"] != "fail":
        pytest.skip("a tensorrt_llm is importable here")
    assert all(c["fix"] for c in report["checks"] if c["status"] != "ok")


def test_cpu_machine_table(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("COLUMNS", "160")
    code, out = run(capsys)
    assert code == 2
    assert "not ready for runtime: tensorrt-llm" in out and "fail" in out and "nvidia-smi is not on PATH" in out


@pytest.fixture
def full_machine(machine):
    """The double GPU machine plus tritonserver with its tensorrtllm backend, and mpirun."""
    server_root = machine.root / "opt" / "tritonserver"
    (server_root / "backends" / "tensorrtllm").mkdir(parents=True)
    (server_root / "bin").mkdir()
    server = server_root / "bin" / "tritonserver"
    server.write_text("#!/bin/sh\nexit 0\n")
    server.chmod(0o755)
    os.symlink(server, machine.bin / "tritonserver")
    machine.add_tool("mpirun")
    return machine


def test_gpu_machine_is_ready(full_machine, capsys):
    code, out = run(capsys, "--json")
    assert code == 0, out
    got = statuses(out)
    assert set(got.values()) == {"ok"}
    details = {c["name"]: c["detail"] for c in json.loads(out)["checks"]}
    assert "NVIDIA H200 (9.0)" in details["GPU"] and details["TensorRT-LLM"].startswith("1.2.0")
    assert details["tensorrtllm backend"].endswith("backends/tensorrtllm")


def test_missing_flag_fails_the_flags_check(full_machine, capsys):
    full_machine.set("SPECBUILD_DOUBLE_DROP_FLAGS", "--use_paged_context_fmha")
    code, out = run(capsys, "--json")
    assert code == 2
    check = next(c for c in json.loads(out)["checks"] if c["name"] == "trtllm-build")
    assert check["status"] == "fail" and "--use_paged_context_fmha is not an option" in check["detail"]


def test_version_out_of_range_fails(full_machine, capsys):
    full_machine.set("SPECBUILD_DOUBLE_TRTLLM_VERSION", "1.3.0")
    code, out = run(capsys, "--json")
    assert code == 2 and statuses(out)["TensorRT-LLM"] == "fail"


def test_recipe_needing_two_gpus_and_mpi(full_machine, capsys, write_recipe):
    (full_machine.bin / "mpirun").unlink()
    recipe = write_recipe("none", build={"tp_size": 2}, triton={"gpu_device_ids": [0, 1]})
    code, out = run(capsys, "--json", "--recipe", str(recipe))
    assert code == 2
    got = statuses(out)
    assert got["GPU"] == "fail" and got["MPI"] == "fail"  # one GPU present; multi-GPU needs MPI
    assert got["trtllm-build"] == "ok"


def test_mpi_is_only_a_warning_for_single_gpu(full_machine, capsys):
    (full_machine.bin / "mpirun").unlink()
    code, out = run(capsys, "--json")
    assert code == 0 and statuses(out)["MPI"] == "warn"
