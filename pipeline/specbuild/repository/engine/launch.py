"""`launch_triton.sh`: how a GPU repository is started (tensorrtllm_backend scripts/launch_triton_server.py@v0.19.0).

The script lives inside the repository folder: tritonserver ignores plain files at the repository root (checked
with tritonserver 2.51 in both model-control modes), and a script beside its models finds them wherever the
folder is copied. It does what TensorRT-LLM's `launch_triton_server.py` does for this deployment, with every
choice made from the recipe:

- leader mode: one MPI rank per GPU (world size = tp * pp); ranks other than 0 load only the TensorRT-LLM models;
- orchestrator mode (`--multi-model`) for draft-target: TRTLLM_ORCHESTRATOR=1, one rank that spawns a worker per
  engine; with fast logits the ranks are pre-spawned instead (TRTLLM_ORCHESTRATOR_SPAWN_PROCESSES=0,
  world size 1 + draft ranks + target ranks, `participant_ids` in both configs).

Environment overrides: TRITONSERVER, HTTP_PORT, GRPC_PORT, METRICS_PORT. Extra arguments go to rank 0.
The script has no `${...}` expansions: nothing in a repository looks like an unfilled template.
"""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

from specbuild.serve.server import LAUNCH_SCRIPT
from specbuild.repository.engine import params
from specbuild.repository.launch_lines import server_settings

if TYPE_CHECKING:
    from specbuild.recipe.schema import Recipe
    from specbuild.speculation import Speculation

SCRIPT_NAME = LAUNCH_SCRIPT


def launch_script(recipe: Recipe, spec: Speculation, role: str = "target") -> str:
    info = params.launch(recipe, role, spec)
    world = int(info["world_size"])
    orchestrator = info["mode"] == "orchestrator"
    spawn = orchestrator and not info.get("disable_spawn_processes", False)
    if spawn:
        how = "rank 0 orchestrates and spawns one worker per engine"
    elif orchestrator:
        how = "rank 0 orchestrates; pre-spawned ranks " + _participants(info)
    else:
        how = "one rank per GPU; rank 0 serves, the others run the engine's other shards"
    lines = [
        "#!/usr/bin/env bash",
        f"# Start tritonserver for this repository (specbuild recipe {recipe.name!r}, method {spec.method}).",
        f"# {info['mode']} mode, {world} MPI rank(s): {how}.",
        "# Overrides: TRITONSERVER, HTTP_PORT, GRPC_PORT, METRICS_PORT; arguments go to rank 0 (e.g. --log-verbose=1).",
        *server_settings(recipe.triton),
    ]
    if orchestrator:
        lines += ["export TRTLLM_ORCHESTRATOR=1", f"export TRTLLM_ORCHESTRATOR_SPAWN_PROCESSES={1 if spawn else 0}"]
    if spawn:
        # The spawned workers own the GPUs: no CUDA memory pools or peer access in the orchestrator.
        lines += [
            'POOL_ARGS="--pinned-memory-pool-byte-size=0 --enable-peer-access=false"',
            "for ((gpu = 0; gpu < $(nvidia-smi --list-gpus | wc -l); gpu++)); do",
            '  POOL_ARGS="$POOL_ARGS --cuda-memory-pool-byte-size=$gpu:0"',
            "done",
        ]
    lines += ["", "# shellcheck disable=SC2086", "exec mpirun --allow-run-as-root \\"]
    for rank in range(world):
        args = [
            '"$TRITONSERVER"',
            '--model-repository="$REPO"',
            '--http-port="$HTTP_PORT"',
            '--grpc-port="$GRPC_PORT"',
            '--metrics-port="$METRICS_PORT"',
            "--disable-auto-complete-config",
            f"--backend-config=python,shm-region-prefix-name=prefix{rank}_",
        ]
        if rank > 0:
            args.append("--model-control-mode=explicit")
            args += [f"--load-model={shlex.quote(m)}" for m in info["tensorrt_llm_model_names"]]
        if spawn:
            args.append("$POOL_ARGS")
        if rank == 0:
            args.append('"$@"')
        lines.append("  -n 1 " + " ".join(args) + (" : \\" if rank < world - 1 else ""))
    return "\n".join(lines) + "\n"


def _participants(info: dict) -> str:
    ids = info.get("participant_ids", {})
    return ", ".join(f"{ids[m]} run {m}" for m in ("tensorrt_llm_draft", "tensorrt_llm") if m in ids)
