"""`specbuild compile --no-validate` on the GPU path, through the TensorRT-LLM double: engines, then the GPU
repository (tensorrtllm backend configs that agree with the engines, and its launch script)."""

from __future__ import annotations

import pytest

from specbuild.cli import main


@pytest.mark.parametrize("method", ["eagle", "draft_target"])
def test_compile_without_validation_writes_engines_and_the_gpu_repository(
    method, machine, write_recipe, tmp_path, capsys
):
    recipe = write_recipe(method)
    code = main(
        [
            "compile",
            str(recipe),
            "--no-validate",
            "--engines-dir",
            str(tmp_path / "engines"),
            "--repo-dir",
            str(tmp_path / "triton_repo"),
        ]
    )
    err = capsys.readouterr().err
    assert code == 0, err
    name = method.replace("_", "-")
    repo = tmp_path / "triton_repo" / name
    assert (repo / "launch_triton.sh").is_file()
    config = (repo / "tensorrt_llm" / "config.pbtxt").read_text()
    assert 'backend: "tensorrtllm"' in config and str(tmp_path / "engines" / name / "target") in config
    assert (tmp_path / "triton_repo" / f"{name}-baseline" / "ensemble" / "config.pbtxt").is_file()
    if method == "draft_target":
        assert "orchestrator" in (repo / "launch_triton.sh").read_text()
        assert (repo / "tensorrt_llm_draft" / "config.pbtxt").is_file()
    assert "serve it with" in err


def test_compile_refuses_a_machine_without_a_gpu(machine, write_recipe, tmp_path, capsys):
    machine.set("SPECBUILD_DOUBLE_GPUS", "none")  # the driver is not loaded
    code = main(["compile", str(write_recipe("none")), "--no-validate", "--engines-dir", str(tmp_path / "engines")])
    err = capsys.readouterr().err
    assert code == 2 and "GPU" in err and "Traceback" not in err
    assert not (tmp_path / "engines" / "none" / "target").exists()
