"""CPU rehearsal of a bundle's container command (issue part 3).

For a tensorrt-llm example recipe (on free ports), the bundle is written for the GPU repository; the CPU
reference repository of the same recipe is built elsewhere, with the repository's launch_triton.sh (the same
text, specbuild.repository.engine.launch) beside its models. Then the bundle's exact container command runs with the image's
paths mapped to local ones — the mounted repository path to the reference repository, /opt/tritonserver to
nvidia-pytriton's tritonserver (the script's TRITONSERVER override and --backend-directory) — and `mpirun` is
specbuild's stand-in, which checks its options and runs rank 0 only (there is no MPI here). The startup,
readiness and liveness probes of the manifest must pass on the manifest's ports, and SIGTERM must stop it within
terminationGracePeriodSeconds. A wrong path or flag in the command makes it fail.

The llm-api flavour (single node): the bundle's command runs the repository's launch_triton.sh against the CPU
reference llm-api repository of the same recipe (specbuild's model.py in place of NVIDIA's, the same model.yaml
and script); a streamed request is answered, and the series the PrometheusRule reads are exported for
`tensorrt_llm` while no speculative metric is. It needs the reference llm-api model
(reference/core_models/llm_api/model.py) and skips, saying so, where this specbuild does not have it yet.
"""

from __future__ import annotations

import json
import re
import shutil
import urllib.request

import pytest
from deploy_helpers import compile_layout, layout_in, make_recipe

from specbuild.deploy.bundle import write_bundle
from specbuild.deploy.mpirun_shim import split
from specbuild.deploy.yamlio import dump_all, load_all
from specbuild.errors import UserError
from specbuild.runtimes.build import resolve_build
from specbuild.methods import describe

pytestmark = pytest.mark.timeout(900)


def prepared(root, stem):
    from specbuild.compile import build_engines
    from specbuild.serve.ports import free_ports
    from specbuild.repository.engine.launch import SCRIPT_NAME, launch_script
    from specbuild.repository.engine.writer import write_repository
    from specbuild.runtimes import runtime_for

    http, grpc, metrics = free_ports("127.0.0.1", 3)
    recipe = make_recipe(stem, {"triton.http_port": http, "triton.grpc_port": grpc, "triton.metrics_port": metrics})
    gpu = compile_layout(root / "gpu", recipe)
    bundle = write_bundle(resolve_build(recipe), gpu, validate=True)
    reference = recipe.model_copy(update={"runtime": "reference"})
    reference._source = recipe.source
    local = layout_in(root / "local", reference)
    build_engines(resolve_build(reference), local)
    repo = write_repository(reference, describe(reference), local, flavour=runtime_for(reference))
    (repo / SCRIPT_NAME).write_text(launch_script(recipe, describe(recipe), "target"))
    assert (repo / SCRIPT_NAME).read_text() == (bundle / "repository" / SCRIPT_NAME).read_text()
    return recipe, bundle, {container_repository(recipe): str(repo)}


def container_repository(recipe):
    """Where the bundle's containers read the repository (deploy.mount_root /models)."""
    return f"/models/{recipe.name}/repository"


def run(bundle, paths, work, **kw):
    from specbuild.deploy.rehearse import rehearse
    from specbuild.serve import find_tritonserver

    work.mkdir(exist_ok=True)
    return rehearse(bundle, paths, binary=find_tritonserver(None), work=work, **kw)


def test_leader_mode_command_serves_and_stops(tmp_path):
    recipe, bundle, paths = prepared(tmp_path, "none")
    result = run(bundle, paths, tmp_path / "work")
    assert result.probes == {"startupProbe": 200, "readinessProbe": 200, "livenessProbe": 200}
    assert result.ports["http"] == recipe.triton.http_port
    assert result.argv[:3] == ["bash", paths[next(iter(paths))] + "/launch_triton.sh", "--exit-timeout-secs=30"]
    assert result.returncode == 0  # a drained, clean exit after SIGTERM
    assert "mpirun stand-in: 1 rank(s)" in result.log.read_text()


def test_draft_target_orchestrator_serves_and_counts_acceptance(tmp_path):
    recipe, bundle, paths = prepared(tmp_path, "draft_target")
    seen = {}

    def while_up(ports):
        body = json.dumps({"text_input": "def add(a, b):", "max_tokens": 12}).encode()
        url = f"http://127.0.0.1:{ports['http']}/v2/models/tensorrt_llm_bls/generate"
        seen["reply"] = json.loads(urllib.request.urlopen(urllib.request.Request(url, data=body), timeout=300).read())
        seen["metrics"] = (
            urllib.request.urlopen(f"http://127.0.0.1:{ports['metrics']}/metrics", timeout=30).read().decode()
        )

    result = run(bundle, paths, tmp_path / "work", while_up=while_up)
    assert result.probes == {"startupProbe": 200, "readinessProbe": 200, "livenessProbe": 200}
    assert seen["reply"]["text_output"]
    text = seen["metrics"]

    def counter(name):
        m = re.search(rf'^{name}{{model="tensorrt_llm_bls",version="1"}} (\d+)', text, re.M)
        assert m, f"{name} not exported"
        return int(m.group(1))

    steps, accepted, drafted = (
        counter(n)
        for n in (
            "specbuild_spec_decode_num_steps_total",
            "specbuild_spec_decode_num_accepted_tokens_total",
            "specbuild_spec_decode_num_draft_tokens_total",
        )
    )
    assert steps >= 1 and 0 <= accepted <= drafted <= steps * recipe.speculation.num_draft_tokens
    # every series the PrometheusRule reads is exported by the server, for the model it names
    rule = load_all((bundle / "prometheusrule.yaml").read_text())[0]
    for r in rule["spec"]["groups"][0]["rules"]:
        for metric, labels in re.findall(r"([a-z_:]+)\{([^}]*)\}", r["expr"]):
            model = re.search(r'model="([^"]+)"', labels)
            wanted = f'{metric}{{model="{model.group(1)}"' if model else f"{metric}{{"
            assert any(
                line.startswith(metric + "{") and (not model or f'model="{model.group(1)}"' in line)
                for line in text.splitlines()
            ), wanted


def llmapi_prepared(root, stem):
    from specbuild.reference.llmapi_runtime import MODEL
    from specbuild.runtimes import runtime_for
    from specbuild.serve.ports import free_ports

    if not MODEL.is_file():
        pytest.skip(
            f"the CPU reference llm-api model ({MODEL.relative_to(MODEL.parents[3])}) is not in this "
            "specbuild yet: the llm-api container command is not rehearsed against a served repository"
        )
    http, grpc, metrics = free_ports("127.0.0.1", 3)
    recipe = make_recipe(stem, {"triton.http_port": http, "triton.grpc_port": grpc, "triton.metrics_port": metrics})
    gpu = compile_layout(root / "gpu", recipe)
    bundle = write_bundle(resolve_build(recipe), gpu, validate=True)
    reference = recipe.model_copy(update={"runtime": "reference"})
    reference._source = recipe.source
    repo = runtime_for(reference).write_repository(
        reference, describe(reference), layout_in(root / "local", reference), "target"
    )
    for rel in ("launch_triton.sh", "tensorrt_llm/1/model.yaml", "tensorrt_llm/config.pbtxt"):
        assert (repo / rel).read_text() == (gpu.repository() / rel).read_text(), rel  # only model.py differs
    return recipe, bundle, {container_repository(recipe): str(repo)}


def test_llmapi_single_node_command_serves_streams_and_stops(tmp_path):
    recipe, bundle, paths = llmapi_prepared(tmp_path, "llmapi_prompt_lookup")
    seen = {}

    def while_up(ports):
        body = json.dumps(
            {
                "text_input": "def add(a, b):",
                "sampling_param_max_tokens": 12,
                "streaming": True,
                "sampling_param_return_perf_metrics": True,
            }
        ).encode()
        url = f"http://127.0.0.1:{ports['http']}/v2/models/tensorrt_llm/generate_stream"
        text = urllib.request.urlopen(urllib.request.Request(url, data=body), timeout=300).read().decode()
        seen["events"] = [json.loads(ln[len("data: ") :]) for ln in text.splitlines() if ln.startswith("data: ")]
        seen["metrics"] = (
            urllib.request.urlopen(f"http://127.0.0.1:{ports['metrics']}/metrics", timeout=30).read().decode()
        )

    result = run(bundle, paths, tmp_path / "work", while_up=while_up)
    assert result.probes == {"startupProbe": 200, "readinessProbe": 200, "livenessProbe": 200}
    assert result.argv[:3] == ["bash", paths[next(iter(paths))] + "/launch_triton.sh", "--exit-timeout-secs=30"]
    assert result.ports["http"] == recipe.triton.http_port and result.returncode == 0
    events = seen["events"]
    assert events and not any("error" in e for e in events), events
    assert any(e.get("text_output") for e in events)
    assert any("total_draft_tokens" in e for e in events)  # the speculative counters: response tensors
    text = seen["metrics"]
    rule = load_all((bundle / "prometheusrule.yaml").read_text())[0]
    for r in rule["spec"]["groups"][0]["rules"]:
        for metric, labels in re.findall(r"([a-z_:]+)\{([^}]*)\}", r["expr"]):
            model = re.search(r'model="([^"]+)"', labels).group(1)
            assert any(ln.startswith(metric + "{") and f'model="{model}"' in ln for ln in text.splitlines()), metric
    assert "specbuild_speculative" not in text and "draft_tokens" not in text  # no speculative metric


RECORDER = """#!{python}
import json, os, sys
with open(os.environ["RECORD"], "a") as f:
    f.write(json.dumps({{"argv": [os.path.basename(sys.argv[0])] + sys.argv[1:]}}) + "\\n")
"""


@pytest.mark.parametrize(
    "stem, changes, launcher",
    [
        ("llmapi_tp2", {}, "deployment.yaml"),
        (
            "llmapi_eagle3",
            {
                "name": "trt-llmapi-e3-tp16",
                "build.tp_size": 16,
                "llm_api.nodes": 2,
                "triton.gpu_device_ids": list(range(16)),
            },
            "slurm/ranks.sh",
        ),
    ],
)
def test_llmapi_commands_exec_tritonserver_with_the_bundles_arguments(tmp_path, stem, changes, launcher):
    """Without a model to serve: the bundle's exact command (the Deployment's, or a Slurm task's across nodes)
    runs the repository's launch_triton.sh, which must exec tritonserver on the repository with the recipe's ports
    and the bundle's --exit-timeout-secs (through trtllm-llmapi-launch across nodes). Both programs are recorders
    put in through the script's own overrides (TRITONSERVER, TRTLLM_LLMAPI_LAUNCH)."""
    import os
    import subprocess
    import sys

    from specbuild.deploy.rehearse import map_word

    recipe = make_recipe(stem, changes)
    gpu = compile_layout(tmp_path / "gpu", recipe)
    bundle = write_bundle(resolve_build(recipe), gpu, validate=True)
    here = {container_repository(recipe): str(bundle / "repository")}  # the repository the containers serve
    if launcher == "deployment.yaml":
        argv = load_all((bundle / launcher).read_text())[0]["spec"]["template"]["spec"]["containers"][0]["command"]
        argv = [map_word(w, here) for w in argv]
    else:
        task = tmp_path / "ranks.sh"
        task.write_text((bundle / launcher).read_text().replace(*next(iter(here.items()))))
        argv = ["bash", str(task)]
    tools = tmp_path / "tools"
    tools.mkdir()
    for name in ("tritonserver", "trtllm-llmapi-launch"):
        (tools / name).write_text(RECORDER.format(python=sys.executable))
        (tools / name).chmod(0o755)
    record = tmp_path / "record.jsonl"
    env = {k: v for k, v in os.environ.items() if k not in ("HTTP_PORT", "GRPC_PORT", "METRICS_PORT")}
    env.update(
        RECORD=str(record),
        TRITONSERVER=str(tools / "tritonserver"),
        TRTLLM_LLMAPI_LAUNCH=str(tools / "trtllm-llmapi-launch"),
        SLURM_PROCID="3",
    )
    run = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    calls = [json.loads(line)["argv"] for line in record.read_text().splitlines()]
    server = [
        "tritonserver",
        f"--model-repository={bundle / 'repository'}",
        "--http-port=8000",
        "--grpc-port=8001",
        "--metrics-port=8002",
        "--exit-timeout-secs=30",
    ]
    if recipe.llm_api.nodes > 1:  # the wrapper gets the whole tritonserver command, on every task alike
        assert calls == [["trtllm-llmapi-launch", str(tools / "tritonserver"), *server[1:]]]
    else:
        assert calls == [server]


def edited(bundle, tmp_path, change):
    copy = tmp_path / "edited"
    shutil.copytree(bundle, copy)
    docs = load_all((copy / "deployment.yaml").read_text())
    c = docs[0]["spec"]["template"]["spec"]["containers"][0]
    c["command"] = change(c["command"])
    (copy / "deployment.yaml").write_text(dump_all(docs))
    return copy


def test_a_wrong_path_in_the_command_fails(tmp_path):
    _, bundle, paths = prepared(tmp_path, "none")
    wrong = edited(bundle, tmp_path, lambda cmd: [cmd[0], cmd[1].replace("launch_triton.sh", "launch.sh"), *cmd[2:]])
    with pytest.raises(UserError, match="exited .* before its startup probe passed"):
        run(wrong, paths, tmp_path / "work")


def test_a_wrong_flag_in_the_command_fails(tmp_path):
    _, bundle, paths = prepared(tmp_path, "none")
    # (tritonserver's getopt_long takes unambiguous prefixes: --exit-timeout-sec would still pass)
    wrong = edited(bundle, tmp_path, lambda cmd: [*cmd[:2], "--exit-timeout-seconds=30"])
    with pytest.raises(UserError, match="exited .* before its startup probe passed"):
        run(wrong, paths, tmp_path / "work")


def test_mpirun_stand_in_checks_what_it_runs():
    options, contexts = split(
        ["--allow-run-as-root", "-mca", "plm_rsh_agent", "kubessh", "-n", "1", "a", "x", ":", "-n", "1", "b"]
    )
    assert options == ["--allow-run-as-root", "-mca"] and contexts == [["a", "x"], ["b"]]
    with pytest.raises(SystemExit, match="unknown option '--allow-run-as-rot'"):
        split(["--allow-run-as-rot", "-n", "1", "a"])
    with pytest.raises(SystemExit, match="does not start with '-n 1"):
        split(["--allow-run-as-root", "-n", "1", "a", ":", "b"])
