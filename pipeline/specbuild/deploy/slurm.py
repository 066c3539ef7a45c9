"""The Slurm job: `sbatch <name>.sbatch` (tensorrtllm_backend README.md@0b9d7d5, "Slurm").

One Slurm task per MPI rank, wired into one world by `srun --mpi=pmix`, block-distributed so ranks fill nodes in
order (rank r on node r // gpus_per_node, as the Kubernetes hostfile does). Each task runs ranks.sh, which execs
its rank's segment of the repository's mpirun line. A spawning orchestrator (draft-target) is one task that runs
the repository's launch script itself (mpirun inside the container; NVIDIA: spawning "might not work properly
with slurm"). The llm-api flavour: on one node one task runs the launch command (the LLM spawns its workers, or
several instances run without MPI); across nodes every task runs it under `srun --mpi=pmix`, where
trtllm-llmapi-launch makes rank 0 serve (tensorrtllm_backend docs/llmapi.md@0b9d7d5). The container runtime is one
function each.

The job runs from the bundle folder as copied to the cluster ($SLURM_SUBMIT_DIR) and binds the deployment's tree
from $MODELS_DIR (default the bundle's models/) where the repository names it (deploy.mount_root): no path of the
machine that compiled appears. Recipe values are allow-listed by the schema and quoted with shlex.quote; the only
words written unquoted are expansions of the script's own variables (`Shell`).
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


class Shell(str):
    """A word written into a script as it is: an expansion of the script's own variables, made of constants of this
    module only. Every other word is quoted with shlex.quote."""


def words(parts: list[str]) -> str:
    return " ".join(p if isinstance(p, Shell) else shlex.quote(p) for p in parts)


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
    lines = [
        "#!/usr/bin/env bash",
        f"# One Slurm task of {ctx.name}: {does}.",
        "# Written by specbuild; regenerate, do not edit.",
        "set -euo pipefail",
    ]
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


ENROOT_CONF_TEXT = """# enroot start --conf (specbuild): keep the task's environment (SLURM_PROCID, PMIx) in the
# container. The mounts are enroot start --mount options of the sbatch script.
environ() {
  env
}
"""


def enroot_conf(ctx: DeployContext) -> str:
    return ENROOT_CONF_TEXT


# --- container runtimes: (lines before srun, srun options, command prefix inside srun) -------------------------
# Each binds the deployment's tree ($SOURCE on the cluster) where the repository names it ($TREE), read-only, and
# the bundle ($BUNDLE) at its own path (ranks.sh).

Runtime = Callable[[DeployContext, str], tuple[list[str], list[str], list[str]]]
RANKS = Shell(f'"$BUNDLE/slurm/{RANKS_SCRIPT}"')


def _pyxis(ctx: DeployContext, image_default: str) -> tuple[list[str], list[str], list[str]]:
    return (
        [],
        [
            f"--container-image={enroot_uri(ctx.image.reference)}",
            Shell('--container-mounts="$SOURCE:$TREE:ro,$BUNDLE:$BUNDLE:ro"'),
        ],
        [],
    )


def _enroot(ctx: DeployContext, image_default: str) -> tuple[list[str], list[str], list[str]]:
    name = f"specbuild-{ctx.name}"
    # enroot start --mount takes fstab fields separated by ':' (NVIDIA/enroot src/runtime.sh@012d362, runtime::start
    # and _do_mounts_fini)
    pre = [
        f"SQSH_DEFAULT={image_default}",
        'SQSH="${SQSH:-$SQSH_DEFAULT}"',
        '[ -f "$SQSH" ] || '
        + words(["enroot", "import", "--output", Shell('"$SQSH"'), "docker://" + enroot_uri(ctx.image.reference)]),
        words(["srun", "--ntasks-per-node=1", "enroot", "create", "--force", "--name", name, Shell('"$SQSH"')]),
    ]
    return (
        pre,
        [],
        [
            "enroot",
            "start",
            "--conf",
            Shell(f'"$BUNDLE/slurm/{ENROOT_CONF}"'),
            "--mount",
            Shell('"$SOURCE:$TREE:none:x-create=dir,bind,ro"'),
            "--mount",
            Shell('"$BUNDLE:$BUNDLE:none:x-create=dir,bind,ro"'),
            name,
        ],
    )


def _apptainer(ctx: DeployContext, image_default: str) -> tuple[list[str], list[str], list[str]]:
    pre = [
        f"SIF_DEFAULT={image_default}",
        'SIF="${SIF:-$SIF_DEFAULT}"',
        '[ -f "$SIF" ] || ' + words(["apptainer", "pull", Shell('"$SIF"'), "docker://" + ctx.image.reference]),
    ]
    return (
        pre,
        [],
        ["apptainer", "exec", "--nv", "--bind", Shell('"$SOURCE:$TREE:ro,$BUNDLE:$BUNDLE:ro"'), Shell('"$SIF"')],
    )


def _bare(ctx: DeployContext, image_default: str) -> tuple[list[str], list[str], list[str]]:
    return [], [], []


RUNTIMES: dict[str, Runtime] = {"pyxis": _pyxis, "enroot": _enroot, "apptainer": _apptainer, "none": _bare}
IMAGE_SUFFIX = {"enroot": ".sqsh", "apptainer": ".sif"}


def _image_default(ctx: DeployContext) -> str:
    """The image file's default, as shell text: deploy.slurm.image_file (relative to the bundle folder, where the
    job runs), else beside the sbatch script."""
    s = ctx.deploy.slurm
    if s.image_file:
        return shlex.quote(s.image_file)
    return '"$BUNDLE/slurm/"' + shlex.quote(f"{ctx.name}{IMAGE_SUFFIX.get(s.container_runtime, '')}")


def _fail(message: str) -> str:
    return f"  echo {shlex.quote('specbuild: ' + message)} >&2\n  exit 2"


def sbatch_script(ctx: DeployContext) -> str:
    s, w = ctx.deploy.slurm, ctx.world
    tasks = tasks_per_node(ctx)
    bare = s.container_runtime == "none"
    pre, srun_opts, prefix = RUNTIMES[s.container_runtime](ctx, _image_default(ctx))
    head = [
        "#!/bin/bash",
        f"#SBATCH --job-name={ctx.name}",
        f"#SBATCH --nodes={w.nodes}",
        f"#SBATCH --ntasks-per-node={tasks}",
        f"#SBATCH --gpus-per-node={w.gpus_per_pod}",
        f"#SBATCH --time={s.time}",
        "#SBATCH --output=slurm/%x-%j.out",
    ]  # relative to the job's working directory: the bundle folder
    head += [f"#SBATCH --partition={s.partition}"] * bool(s.partition)
    head += [f"#SBATCH --account={s.account}"] * bool(s.account)
    head += [f"#SBATCH --cpus-per-task={s.cpus_per_task}"] * bool(s.cpus_per_task)
    head += [f"#SBATCH {opt}" for opt in s.extra_sbatch]
    if any("\n" in line or "\r" in line for line in head):  # the schema's allow-lists make this unreachable
        raise ValueError("an #SBATCH line holds a line break")
    p = ctx.ports
    submit = f"cd <this bundle> && sbatch slurm/{ctx.name}.sbatch"
    source = (
        ['SOURCE="$TREE"  # container runtime none: the nodes hold the tree where the repository names it']
        if bare
        else ['MODELS_DIR="${MODELS_DIR:-$BUNDLE/models}"', f'SOURCE="$MODELS_DIR"/{shlex.quote(ctx.name)}']
    )
    fill = (
        f"bash copy-models.sh HOST:{ctx.deploy.mount_root}"
        if bare
        else "bash copy-models.sh HOST:<bundle>/models, or set MODELS_DIR"
    )
    body = [
        "",
        f"# {ctx.recipe.name}: {w.summary};",
        f"# container runtime {s.container_runtime}, image {ctx.image.reference}.",
        f"# The containers read the repository and the {ctx.flavour.paths_read} below {ctx.tree} (deploy.mount_root),",
        "# bound from "
        + ("the same folder of the nodes" if bare else "$MODELS_DIR/<name> (default: the bundle's models/)")
        + ", which copy-models.sh fills. Submit from the bundle",
        "# folder (the job finds ranks.sh there). Written by specbuild.",
        "set -euo pipefail",
        'BUNDLE="${SLURM_SUBMIT_DIR:-$PWD}"',
        f'if [ ! -f "$BUNDLE/slurm/{RANKS_SCRIPT}" ]; then',
        _fail(f"submit from the bundle folder: {submit}"),
        "fi",
        f"TREE={shlex.quote(ctx.tree)}",
        *source,
        'if [ ! -f "$SOURCE/repository/launch_triton.sh" ]; then',
        '  echo "specbuild: $SOURCE holds no repository: fill it on the machine that compiled with" >&2',
        _fail(fill),
        "fi",
        *(
            []
            if bare
            else [
                'case "$SOURCE$BUNDLE" in',
                "  *[[:space:],:]*)",  # the mount lists separate with these
                _fail("the container mounts cannot hold a space, a comma or a colon in $SOURCE or $BUNDLE"),
                "esac",
            ]
        ),
        *pre,
        'echo "rank 0 serves HTTP :%d, gRPC :%d, metrics :%d on $(scontrol show hostnames "$SLURM_JOB_NODELIST" '
        '| head -n 1)"' % (p["http"], p["grpc"], p["metrics"]),
    ]
    srun = [
        "srun",
        srun_mpi(ctx),
        f"--ntasks={tasks * w.nodes}",
        f"--ntasks-per-node={tasks}",
        "--distribution=block",
        "--kill-on-bad-exit=1",
        *srun_opts,
        *prefix,
        "bash",
        RANKS,
    ]
    body.append(words(srun))
    return "\n".join(head + body) + "\n"


def slurm_files(ctx: DeployContext) -> dict[str, Callable[[], str]]:
    """The Slurm files: relative path -> what renders it."""
    files = {f"slurm/{ctx.name}.sbatch": lambda: sbatch_script(ctx), f"slurm/{RANKS_SCRIPT}": lambda: ranks_script(ctx)}
    if ctx.deploy.slurm.container_runtime == "enroot":
        files[f"slurm/{ENROOT_CONF}"] = lambda: enroot_conf(ctx)
    return files
