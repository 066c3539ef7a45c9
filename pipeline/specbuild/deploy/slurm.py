"""The Slurm job: `sbatch <name>.sbatch` (scale-out fact sheet §2.4; tensorrtllm_backend README "Slurm").

One Slurm task per MPI rank, wired into one world by `srun --mpi=pmix`, block-distributed so ranks fill nodes in
order (rank r on node r // gpus_per_node, as the Kubernetes hostfile does). Each task runs ranks.sh, which execs
its rank's segment of the repository's mpirun line. A spawning orchestrator (draft-target) is one task that runs
the repository's launch script itself (mpirun inside the container; NVIDIA: spawning "might not work properly
with slurm"). The llm-api flavour: on one node one task runs the launch command (the LLM spawns its workers, or
several instances run without MPI); across nodes every task runs it under `srun --mpi=pmix`, where
trtllm-llmapi-launch makes rank 0 serve (llmapi fact sheet §7.5, BK docs/llmapi.md). The container runtime is one
function each.
"""

from __future__ import annotations

import shlex
from typing import Callable

from specbuild.deploy.context import DeployContext
from specbuild.deploy.launch import SLURM_EVERY_TASK, SLURM_ONE_TASK, SLURM_RANKS

RANKS_SCRIPT = "ranks.sh"
ENROOT_CONF = "enroot.conf"


def enroot_uri(reference: str) -> str:
    """nvcr.io/nvidia/tritonserver:tag -> nvcr.io#nvidia/tritonserver:tag (enroot's [REGISTRY#]IMAGE[:TAG])."""
    first, _, rest = reference.partition("/")
    return f"{first}#{rest}" if rest and ("." in first or ":" in first) else reference


PATHS_READ = {"engine": "engines, tokenizer", "llm-api": "checkpoints (model, tokenizer, speculative model)"}
NAMED_BY = {"engine": "config.pbtxt", "llm-api": "model.yaml"}


def host_paths(ctx: DeployContext) -> list[str]:
    """What the ranks read: the repository, engines or checkpoints, tokenizer (at their own paths) and the
    bundle."""
    return [m.path for m in ctx.mounts] + [str(ctx.folder)]


def tasks_per_node(ctx: DeployContext) -> int:
    return 1 if ctx.launch.slurm == SLURM_ONE_TASK else ctx.world.ranks_per_node


def srun_mpi(ctx: DeployContext) -> str:
    return "--mpi=none" if ctx.launch.slurm == SLURM_ONE_TASK else "--mpi=pmix"


TASK_DOES = {
    SLURM_RANKS: "exec this task's rank of {script}'s mpirun line\n# (srun --mpi=pmix makes the tasks one MPI world)",
    SLURM_ONE_TASK: "the job's one task: exec the repository's launch command",
    SLURM_EVERY_TASK: "every task (one MPI rank, srun --mpi=pmix) execs the repository's launch\n# command; its "
                      "trtllm-llmapi-launch makes rank 0 serve and the others LLM workers",
}


def ranks_script(ctx: DeployContext) -> str:
    does = TASK_DOES[ctx.launch.slurm].format(script=ctx.launch.script.name)
    lines = ["#!/usr/bin/env bash",
             f"# One Slurm task of {ctx.name}: {does}.",
             "# Written by specbuild; regenerate, do not edit.",
             "set -euo pipefail"]
    if ctx.launch.slurm != SLURM_RANKS:
        lines.append("exec " + shlex.join(ctx.launch.container_argv))
        return "\n".join(lines) + "\n"
    lines += [f"export {k}={shlex.quote(v)}" for k, v in ctx.launch.env.items()]  # what the script exports
    lines.append('case "${SLURM_PROCID:?run under srun (sbatch script)}" in')
    for rank, argv in enumerate(ctx.launch.rank_argv):
        lines.append(f"  {rank}) exec {shlex.join(argv)} ;;")
    lines.append(f'  *) echo "rank $SLURM_PROCID: this world has {len(ctx.launch.rank_argv)} ranks" >&2; exit 2 ;;')
    lines.append("esac")
    return "\n".join(lines) + "\n"


def enroot_conf(ctx: DeployContext) -> str:
    """enroot start --conf: keep the task's environment (SLURM_PROCID, PMIx) and bind the paths read-only."""
    lines = ["# enroot start --conf (specbuild): the task's environment and the paths the ranks read.",
             "environ() {", "  env", "}", "mounts() {"]
    lines += [f'  echo "{p} {p} none bind,ro"' for p in host_paths(ctx)]
    lines += ["}"]
    return "\n".join(lines) + "\n"


# --- container runtimes: (lines before srun, srun options, command prefix inside srun) -------------------------

Runtime = Callable[[DeployContext, str], tuple[list[str], list[str], list[str]]]


def _pyxis(ctx: DeployContext, image_file: str) -> tuple[list[str], list[str], list[str]]:
    mounts = ",".join(f"{p}:{p}:ro" for p in host_paths(ctx))
    return [], [f"--container-image={enroot_uri(ctx.image.reference)}", f"--container-mounts={mounts}"], []


def _enroot(ctx: DeployContext, image_file: str) -> tuple[list[str], list[str], list[str]]:
    name = f"specbuild-{ctx.name}"
    pre = [f'SQSH="${{SQSH:-{image_file}}}"',
           f'[ -f "$SQSH" ] || enroot import --output "$SQSH" {shlex.quote("docker://" + enroot_uri(ctx.image.reference))}',
           f'srun --ntasks-per-node=1 enroot create --force --name {name} "$SQSH"']
    return pre, [], ["enroot", "start", "--conf", str(ctx.folder / "slurm" / ENROOT_CONF), name]


def _apptainer(ctx: DeployContext, image_file: str) -> tuple[list[str], list[str], list[str]]:
    pre = [f'SIF="${{SIF:-{image_file}}}"',
           f'[ -f "$SIF" ] || apptainer pull "$SIF" {shlex.quote("docker://" + ctx.image.reference)}']
    binds = ",".join(f"{p}:{p}:ro" for p in host_paths(ctx))
    return pre, [], ["apptainer", "exec", "--nv", "--bind", binds, '"$SIF"']


def _bare(ctx: DeployContext, image_file: str) -> tuple[list[str], list[str], list[str]]:
    return [], [], []


RUNTIMES: dict[str, Runtime] = {"pyxis": _pyxis, "enroot": _enroot, "apptainer": _apptainer, "none": _bare}
IMAGE_SUFFIX = {"enroot": ".sqsh", "apptainer": ".sif"}


def sbatch_script(ctx: DeployContext) -> str:
    s, w = ctx.deploy.slurm, ctx.world
    tasks = tasks_per_node(ctx)
    image_file = s.image_file or str(ctx.folder / "slurm" / f"{ctx.name}{IMAGE_SUFFIX.get(s.container_runtime, '')}")
    pre, srun_opts, prefix = RUNTIMES[s.container_runtime](ctx, image_file)
    head = ["#!/bin/bash",
            f"#SBATCH --job-name={ctx.name}",
            f"#SBATCH --nodes={w.nodes}",
            f"#SBATCH --ntasks-per-node={tasks}",
            f"#SBATCH --gpus-per-node={w.gpus_per_pod}",
            f"#SBATCH --time={s.time}",
            f"#SBATCH --output={ctx.folder / 'slurm'}/%x-%j.out"]
    head += [f"#SBATCH --partition={s.partition}"] * bool(s.partition)
    head += [f"#SBATCH --account={s.account}"] * bool(s.account)
    head += [f"#SBATCH --cpus-per-task={s.cpus_per_task}"] * bool(s.cpus_per_task)
    head += [f"#SBATCH {opt}" for opt in s.extra_sbatch]
    p = ctx.ports
    body = [
        "",
        f"# {ctx.recipe.name}: {w.summary};",
        f"# container runtime {s.container_runtime}, image {ctx.image.reference}.",
        f"# The {PATHS_READ[ctx.kind]} and the repository are read at the paths they were compiled to",
        f"# ({NAMED_BY[ctx.kind]} names them): run on a cluster whose shared filesystem has them there. Written by "
        "specbuild.",
        "set -euo pipefail",
        *pre,
        'echo "rank 0 serves HTTP :%d, gRPC :%d, metrics :%d on $(scontrol show hostnames "$SLURM_JOB_NODELIST" '
        '| head -n 1)"' % (p["http"], p["grpc"], p["metrics"]),
    ]
    srun = ["srun", srun_mpi(ctx), f"--ntasks={tasks * w.nodes}", f"--ntasks-per-node={tasks}", "--distribution=block",
            "--kill-on-bad-exit=1", *srun_opts, *prefix, "bash", str(ctx.folder / "slurm" / RANKS_SCRIPT)]
    body.append(" ".join(a if a.startswith('"$') else shlex.quote(a) for a in srun))
    return "\n".join(head + body) + "\n"


def slurm_files(ctx: DeployContext) -> dict[str, str]:
    files = {f"slurm/{ctx.name}.sbatch": sbatch_script(ctx), f"slurm/{RANKS_SCRIPT}": ranks_script(ctx)}
    if ctx.deploy.slurm.container_runtime == "enroot":
        files[f"slurm/{ENROOT_CONF}"] = enroot_conf(ctx)
    return files
