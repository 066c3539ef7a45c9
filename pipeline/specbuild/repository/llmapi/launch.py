"""`launch_triton.sh` of an llm-api repository (TensorRT-LLM triton_backend/scripts/launch_triton_server.py@0a2e2c1,
tensorrtllm_backend docs/llmapi.md@0b9d7d5): how the one `tensorrt_llm` model is started.

- single: one tritonserver process (triton-inference-server/tutorials
  Feature_Guide/Speculative_Decoding/TRT-LLM/README.md@e848952); tensor/pipeline parallelism inside it is the LLM's own
  business (it spawns its MPI workers from model.yaml's tensor_parallel_size / pipeline_parallel_size;
  tensorrtllm_backend README.md@0b9d7d5);
- multi-instance: the same command; config.pbtxt holds instance_group count and gpu_device_ids, and no MPI runs
  (launch_triton_server.py --no-mpi, tensorrtllm_backend docs/llmapi.md@0b9d7d5);
- multi-node: run this script on every rank (srun --mpi=pmix, or mpirun across hosts); it wraps tritonserver in
  trtllm-llmapi-launch, which makes rank 0 serve and the others LLM workers (TensorRT-LLM
  tensorrt_llm/llmapi/trtllm-llmapi-launch@020c89e).

A repository written where NVIDIA's model.py + helpers.py were not at hand (a CPU machine without TensorRT-LLM:
specbuild.trtllm.llmapi_runtime) has no `tensorrt_llm/1/model.py`: the script then serves a copy of the repository
in a temporary folder, with the two files of the container it runs in (/app/all_models/llmapi/, tensorrtllm_backend
dockerfile/Dockerfile.triton.trt_llm_backend@0b9d7d5), and refuses to start when they are missing, or, for several
instances, when that model.py does not read config.pbtxt's gpu_device_ids.

Environment overrides: TRITONSERVER, HTTP_PORT, GRPC_PORT, METRICS_PORT, TRTLLM_LLMAPI_LAUNCH, LLMAPI_MODEL_DIR;
arguments go to tritonserver. No `${...}` expansions appear in the script.
"""

from __future__ import annotations

from pathlib import Path

from specbuild.repository.launch_lines import server_settings
from specbuild.repository.llmapi.configs import GPU_IDS_PARAMETER
from specbuild.serve.server import LAUNCH_SCRIPT

SCRIPT_NAME = LAUNCH_SCRIPT
# NVIDIA's llmapi model in the tritonserver:<yy.mm>-trtllm-python-py3 containers (tensorrtllm_backend
# dockerfile/Dockerfile.triton.trt_llm_backend@0b9d7d5)
CONTAINER_MODEL_DIR = Path("/app/all_models/llmapi/tensorrt_llm/1")
NVIDIA_FILES = ("model.py", "helpers.py")  # what the tensorrt-llm runtime's repository takes from NVIDIA


def launch_mode(recipe) -> dict:
    a, b = recipe.llm_api, recipe.build
    world = b.tp_size * b.pp_size
    if a.nodes > 1:
        return {
            "mode": "multi-node",
            "world_size": world,
            "nodes": a.nodes,
            "ranks_per_node": -(-world // a.nodes),
            "wrapper": "trtllm-llmapi-launch",
        }
    if a.instances > 1:
        return {"mode": "multi-instance", "world_size": world, "instances": a.instances}
    return {"mode": "single", "world_size": world}


def server_command(recipe, repository: str) -> list[str]:
    """What the script runs (shown by `specbuild plan`), with the recipe's ports."""
    t = recipe.triton
    argv = [
        "tritonserver",
        f"--model-repository={repository}",
        f"--http-port={t.http_port}",
        f"--grpc-port={t.grpc_port}",
        f"--metrics-port={t.metrics_port}",
    ]
    return (["trtllm-llmapi-launch"] if launch_mode(recipe)["mode"] == "multi-node" else []) + argv


def launch_script(recipe) -> str:
    info = launch_mode(recipe)
    mode = info["mode"]
    how = {
        "single": "one tritonserver process; the LLM spawns its own workers for tensor/pipeline parallelism",
        "multi-instance": f"{info.get('instances')} instances in one tritonserver, no MPI (gpu_device_ids in "
        "config.pbtxt)",
        "multi-node": f"run on each of the {info.get('nodes', 1) * info.get('ranks_per_node', 1)} ranks "
        f"({info.get('nodes')} nodes) under srun --mpi=pmix or mpirun; rank 0 serves",
    }[mode]
    lines = [
        "#!/usr/bin/env bash",
        f"# Start tritonserver for this llm-api repository (specbuild recipe {recipe.name!r}).",
        f"# {mode}: {how}.",
        "# Overrides: TRITONSERVER, HTTP_PORT, GRPC_PORT, METRICS_PORT, TRTLLM_LLMAPI_LAUNCH, LLMAPI_MODEL_DIR; "
        "arguments go to tritonserver.",
        *server_settings(recipe.triton),
    ]
    lines += _model_files_at_start(recipe)
    server = (
        '"$TRITONSERVER" --model-repository="$REPO" --http-port="$HTTP_PORT" --grpc-port="$GRPC_PORT" '
        '--metrics-port="$METRICS_PORT" "$@"'
    )
    if mode == "multi-node":
        lines += [
            'TRTLLM_LLMAPI_LAUNCH="$(printenv TRTLLM_LLMAPI_LAUNCH || echo trtllm-llmapi-launch)"',
            "",
            'exec "$TRTLLM_LLMAPI_LAUNCH" ' + server,
        ]
    else:
        lines += ["", "exec " + server]
    return "\n".join(lines) + "\n"


def _model_files_at_start(recipe) -> list[str]:
    """Shell lines: when the repository has no model.py, serve a temporary copy with the container's."""
    files = " ".join(NVIDIA_FILES)
    lines = [
        "",
        "# NVIDIA's model.py + helpers.py: when compile had none to copy, take the container's",
        'if [ ! -f "$REPO/tensorrt_llm/1/model.py" ]; then',
        f'  LLMAPI_MODEL_DIR="$(printenv LLMAPI_MODEL_DIR || echo {CONTAINER_MODEL_DIR})"',
        f"  for f in {files}; do",
        '    if [ ! -f "$LLMAPI_MODEL_DIR/$f" ]; then',
        '      echo "launch_triton.sh: $LLMAPI_MODEL_DIR/$f not found: this repository takes the llmapi model of '
        "NVIDIA from the container it runs in - run it in nvcr.io/nvidia/tritonserver:<yy.mm>-trtllm-python-py3, "
        'or set LLMAPI_MODEL_DIR to the tensorrt_llm/1 folder of triton_backend/all_models/llmapi/" >&2',
        "      exit 2",
        "    fi",
        "  done",
    ]
    if recipe.llm_api.instances > 1:
        lines += [
            f'  if ! grep -q {GPU_IDS_PARAMETER} "$LLMAPI_MODEL_DIR/model.py"; then',
            f'    echo "launch_triton.sh: $LLMAPI_MODEL_DIR/model.py does not read the {GPU_IDS_PARAMETER} parameter '
            f"of config.pbtxt: its {recipe.llm_api.instances} instances would all load the LLM on the same GPUs - use "
            'a container whose llmapi model has multi-instance serving, or recompile with llm_api.instances: 1" >&2',
            "    exit 2",
            "  fi",
        ]
    lines += [
        '  RUN_REPO="$(mktemp -d -t specbuild-llmapi.XXXXXX)"',
        '  cp -R "$REPO/." "$RUN_REPO/"',
        f'  for f in {files}; do cp "$LLMAPI_MODEL_DIR/$f" "$RUN_REPO/tensorrt_llm/1/"; done',
        '  REPO="$RUN_REPO"',
        "fi",
    ]
    return lines
