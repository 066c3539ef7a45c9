"""A CPU machine without TensorRT-LLM (no test double on the path): `compile` of an llm-api tensorrt-llm recipe
writes its repository and bundle (NVIDIA's model.py comes from the container at start), and `compile
--render-only` renders an engine-flavour recipe's repositories and bundle for review into render/<name>/, saying
that the engines are missing and leaving nothing that looks like a build."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from trtllm_helpers import DOUBLES, REPO
from specbuild.runtimes.build import resolve_build

NVIDIA_MODEL = DOUBLES / "triton_backend" / "all_models" / "llmapi" / "tensorrt_llm" / "1"


def cpu_env() -> dict[str, str]:
    """This machine as it is: no double (no SPECBUILD_TRTLLM_DOUBLE, doubles off the path), no model dir."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SPECBUILD_DOUBLE", "SPECBUILD_TRTLLM_DOUBLE", "SPECBUILD_LLMAPI"))
    }
    env["PYTHONPATH"] = str(REPO / "pipeline")
    return env


def said(log: str) -> str:
    """A log's text with its lines joined: on a pipe a long line wraps at the log's width (docs/machine-output.md)."""
    return " ".join(log.split())


def specbuild(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "specbuild.cli", *args],
        cwd=cwd,
        env=cpu_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.fixture(scope="module")
def cpu_llmapi(tmp_path_factory):
    """compile --no-validate of the shipped llm-api draft-target recipe, on this CPU machine."""
    assert not Path("/app/all_models/llmapi").exists(), "this test needs a machine outside NVIDIA's container"
    work = tmp_path_factory.mktemp("cpu")
    done = specbuild(
        "compile", str(REPO / "recipes" / "tensorrt-llm" / "llmapi_draft_target.yaml"), "--no-validate", cwd=work
    )
    return work, done


def test_llmapi_compile_writes_repository_and_bundle_without_tensorrt_llm(cpu_llmapi):
    work, done = cpu_llmapi
    assert done.returncode == 0, done.stderr[-2000:]
    assert "needs TensorRT-LLM" not in done.stderr
    assert "TensorRT-LLM is not installed here" in said(done.stderr)
    assert "launch_triton.sh copies them at start" in said(done.stderr)
    repo = work / "triton_repo" / "trt-llmapi-draft-target"
    assert sorted(p.name for p in (repo / "tensorrt_llm" / "1").iterdir()) == ["model.yaml"]
    assert (repo / "tensorrt_llm" / "config.pbtxt").is_file() and (repo / "launch_triton.sh").is_file()
    assert (work / "triton_repo" / "trt-llmapi-draft-target-baseline" / "tensorrt_llm" / "1" / "model.yaml").is_file()
    bundle = work / "deploy" / "trt-llmapi-draft-target"
    assert {"kustomization.yaml", "deployment.yaml", "bundle.json", "README.md"} <= {p.name for p in bundle.iterdir()}
    assert "decoding_type: DraftTarget" in (repo / "tensorrt_llm" / "1" / "model.yaml").read_text()


FAKE_TRITONSERVER = """#!/bin/sh
for a in "$@"; do case "$a" in --model-repository=*) repo="${a#--model-repository=}";; esac; done
echo "SERVED $repo"
ls "$repo/tensorrt_llm/1"
cmp "$repo/tensorrt_llm/1/model.py" "$LLMAPI_MODEL_DIR/model.py" && echo "MODEL_PY_IS_THE_CONTAINERS"
cmp "$repo/tensorrt_llm/1/model.yaml" "$ORIGINAL/tensorrt_llm/1/model.yaml" && echo "MODEL_YAML_IS_THE_COMPILED"
"""


def test_the_launch_script_takes_nvidia_model_from_the_container_at_start(cpu_llmapi, tmp_path):
    work, _ = cpu_llmapi
    repo = work / "triton_repo" / "trt-llmapi-draft-target"
    server = tmp_path / "tritonserver"
    server.write_text(FAKE_TRITONSERVER)
    server.chmod(0o755)
    env = dict(
        cpu_env(),
        TRITONSERVER=str(server),
        LLMAPI_MODEL_DIR=str(NVIDIA_MODEL),
        ORIGINAL=str(repo),
        TMPDIR=str(tmp_path),
    )
    done = subprocess.run(["bash", str(repo / "launch_triton.sh")], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    out = done.stdout.split()
    served = Path(out[out.index("SERVED") + 1])
    assert served != repo and served.parent == tmp_path  # a copy: the compiled repository is left as it is
    assert {"model.py", "helpers.py", "model.yaml"} <= set(out)
    assert "MODEL_PY_IS_THE_CONTAINERS" in out and "MODEL_YAML_IS_THE_COMPILED" in out
    assert sorted(p.name for p in (repo / "tensorrt_llm" / "1").iterdir()) == ["model.yaml"]
    # outside the container, without LLMAPI_MODEL_DIR: refused with what to do
    env.pop("LLMAPI_MODEL_DIR")
    done = subprocess.run(["bash", str(repo / "launch_triton.sh")], env=env, capture_output=True, text=True)
    assert done.returncode == 2
    assert "/app/all_models/llmapi/tensorrt_llm/1/model.py not found" in said(done.stderr)
    assert "trtllm-python-py3" in said(done.stderr) and "LLMAPI_MODEL_DIR" in said(done.stderr)


def test_multi_instance_needs_a_model_py_that_reads_gpu_device_ids(machine, llmapi_recipe, tmp_path, capsys):
    """compile and check refuse a model.py they can see that does not read gpu_device_ids (the 1.0/1.1 model.py,
    model.py@b35ac1b); launch_triton.sh refuses the container's at start when none was copied."""
    from specbuild.cli import main

    old = tmp_path / "old_model"
    old.mkdir()
    (old / "model.py").write_text("# an llmapi model.py without multi-instance serving\n")
    (old / "helpers.py").write_text("")
    machine.set("SPECBUILD_DOUBLE_TRTLLM_VERSION", "1.2.1")
    recipe = llmapi_recipe("draft_target", llm_api={"instances": 2}, triton={"gpu_device_ids": [0, 1]})
    assert main(["check", str(recipe), "--llmapi-model-dir", str(old)]) == 2
    err = capsys.readouterr().err
    assert "llm_api.instances" in err and "does not read config.pbtxt's gpu_device_ids" in err
    assert main(["check", str(recipe), "--llmapi-model-dir", str(NVIDIA_MODEL)]) == 0  # reads it
    # the script of a repository without model.py checks the container's
    from specbuild.repository.llmapi.launch import launch_script
    from specbuild.recipe import load_recipe

    script = tmp_path / "launch_triton.sh"
    script.write_text(launch_script(load_recipe(recipe, check_files=False)))
    (tmp_path / "tensorrt_llm" / "1").mkdir(parents=True)
    done = subprocess.run(
        ["bash", str(script)],
        env=dict(cpu_env(), LLMAPI_MODEL_DIR=str(old), TRITONSERVER="/bin/true"),
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2 and "does not read the gpu_device_ids parameter" in done.stderr, done.stderr


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    work = tmp_path_factory.mktemp("render")
    done = specbuild("compile", str(REPO / "recipes" / "tensorrt-llm" / "medusa.yaml"), "--render-only", cwd=work)
    return work, done


def test_engine_flavour_renders_repository_and_bundle_for_review(rendered):
    work, done = rendered
    assert done.returncode == 0, done.stderr[-2000:]
    root = work / "render" / "trt-medusa"
    repo = root / "triton_repo" / "trt-medusa"
    assert (repo / "tensorrt_llm" / "config.pbtxt").is_file() and (repo / "launch_triton.sh").is_file()
    assert (root / "triton_repo" / "trt-medusa-baseline" / "ensemble" / "config.pbtxt").is_file()
    assert (root / "deploy" / "trt-medusa" / "kustomization.yaml").is_file()
    engine = work / "engines" / "trt-medusa" / "target"
    config = (repo / "tensorrt_llm" / "config.pbtxt").read_text()
    assert str(engine) in config  # names the folder a real compile builds ...
    note = (root / "RENDER_ONLY.md").read_text()
    assert "NOT a build" in note and "No engines were built" in note
    assert "engines/trt-medusa/target" in note and "engines/trt-medusa/baseline" in note
    assert "trtllm-build --checkpoint_dir engines/trt-medusa/checkpoints/target" in note
    assert "rendered for review only" in said(done.stderr) and "not servable as is" in said(done.stderr)


def test_a_render_leaves_nothing_that_looks_like_a_build(rendered):
    work, _ = rendered
    assert not (work / "engines").exists()  # ... but builds none
    assert not (work / "triton_repo").exists() and not (work / "deploy").exists() and not (work / "reports").exists()
    assert not list(work.rglob("*.engine")) and not list(work.rglob(".*partial*"))


def test_a_failed_render_leaves_nothing(machine, write_recipe, tmp_path, monkeypatch):
    from rich.console import Console

    from specbuild.compile import CompileOptions, compile_recipe
    import specbuild.compile as compile_module
    from specbuild.errors import UserError
    from specbuild.plan import Layout
    from specbuild.recipe import load_recipe

    def broken(*_a, **_k):
        raise UserError("deployment bundle: injected failure")

    monkeypatch.setattr(compile_module, "write_bundle", broken)
    recipe = load_recipe(write_recipe("medusa"))
    layout = Layout(tmp_path / "engines", tmp_path / "triton_repo", tmp_path / "reports", recipe.name)
    with pytest.raises(UserError, match="injected failure"):
        compile_recipe(
            resolve_build(recipe), layout, CompileOptions(render_only=True), Console(file=open(os.devnull, "w"))
        )
    assert not (tmp_path / "render").exists() or not any((tmp_path / "render").iterdir())
    assert not (tmp_path / "engines").exists()
