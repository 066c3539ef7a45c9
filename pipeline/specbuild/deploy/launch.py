"""What a bundle's containers run: the repository's own launch command (each flavour's `launch`: deploy/
engine_bundle.py, deploy/llmapi_bundle.py), and how a launch script is read back.

The engine flavour (TensorRT engines, the `tensorrtllm` C++ backend): the repository's `launch_triton.sh`
(specbuild.repository.engine.launch), which execs `mpirun` with one `tritonserver` per rank (leader mode) or the orchestrator.
- Kubernetes runs exactly `bash <repo>/launch_triton.sh --exit-timeout-secs=T`; across nodes the leader first
  writes the group's hostfile, then execs the same command (mpirun reaches the workers through kubessh).
- Slurm starts the ranks itself (`srun --mpi=pmix`, NVIDIA's leader-mode Slurm launch, tensorrtllm_backend
  README.md@0b9d7d5): each task runs its rank's segment of the script's mpirun line, read from the script text, so
  the two cannot drift. A spawning orchestrator (one rank) runs the script itself instead.

The llm-api flavour (TensorRT-LLM's PyTorch backend, NVIDIA's llmapi Python model): the repository's
`launch_triton.sh` (specbuild.repository.llmapi.launch), which execs tritonserver itself.
- single node (one instance, tensor/pipeline parallelism inside it, or several instances without MPI): Kubernetes
  and the one Slurm task run exactly `bash <repo>/launch_triton.sh --exit-timeout-secs=T`; the LLM spawns its
  own workers inside the pod.
- across nodes (llm_api.nodes > 1): the script wraps tritonserver in trtllm-llmapi-launch, and EVERY MPI rank runs
  the same command: trtllm-llmapi-launch makes rank 0 serve and the others LLM workers (TensorRT-LLM
  tensorrt_llm/llmapi/trtllm-llmapi-launch@020c89e). Slurm: `srun --mpi=pmix` with one task per rank, each running
  the command (NVIDIA's documented launch, tensorrtllm_backend docs/llmapi.md@0b9d7d5). Kubernetes (no NVIDIA recipe:
  the likely way, unverified; docs/deploying.md): the leader writes the group's hostfile, then execs `mpirun -np <world>
  --map-by ppr:<ranks per node>:node <the command>`, reaching the workers through kubessh as the engine flavour does.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING


if TYPE_CHECKING:
    from specbuild.recipe.schema import Recipe

IMAGE_TRITONSERVER = "/opt/tritonserver/bin/tritonserver"  # the script's default TRITONSERVER (NGC layout)
PORT_VARIABLES = ("HTTP_PORT", "GRPC_PORT", "METRICS_PORT")


# How the Slurm tasks run (slurm.py): each task execs its rank's app context of the script's mpirun line; one task
# runs the repository's launch command; or every task (one per MPI rank, srun --mpi=pmix) runs it.
SLURM_RANKS, SLURM_ONE_TASK, SLURM_EVERY_TASK = "ranks", "one task runs the script", "every task runs the script"


@dataclass(frozen=True)
class LaunchPlan:
    script: Path  # the repository's launch script
    script_text: str  # the launch script this recipe implies (a repository on disk must hold exactly this)
    container_argv: list[str]  # the repository's launch command: the serving container's command
    rank_argv: list[list[str]]  # engine leader mode: per MPI rank, as the script's mpirun line runs it (image paths)
    env: dict[str, str] = field(default_factory=dict)  # variables the script exports before mpirun
    ports: dict[str, int] = field(default_factory=dict)  # HTTP_PORT/GRPC_PORT/METRICS_PORT defaults of the script
    slurm: str = SLURM_RANKS
    leader_argv: list[str] | None = None  # across nodes: what the leader execs once the hostfile is written

    @property
    def leader_command(self) -> list[str]:
        """What a multi-node leader execs last: the launch command itself (engine: its mpirun reaches the
        workers), or mpirun running the launch command on every rank (llm-api)."""
        return self.leader_argv or self.container_argv


@dataclass(frozen=True)
class ScriptParts:
    """What a launch_triton.sh text says: its exports, port defaults, and the mpirun app contexts."""

    env: dict[str, str]
    ports: dict[str, int]
    segments: list[list[str]]  # shell words of each `-n 1 ...` app context, variables unexpanded


class ScriptFormatError(ValueError):
    pass


_PORT_LINE = re.compile(r'^(?P<var>[A-Z_]+)="\$\(printenv (?P=var) \|\| echo (?P<port>\d+)\)"$')
_EXPORT = re.compile(r"^export (?P<var>[A-Z_]+)=(?P<value>\S+)$")


def script_ports(text: str) -> dict[str, int]:
    """The HTTP_PORT/GRPC_PORT/METRICS_PORT defaults of a launch_triton.sh (both kinds write them the same way).
    Raises ScriptFormatError when one is missing."""
    ports = {m.group("var"): int(m.group("port")) for m in map(_PORT_LINE.match, text.splitlines()) if m}
    if set(ports) != set(PORT_VARIABLES):
        raise ScriptFormatError(f"missing port defaults (found {sorted(ports)}, want {list(PORT_VARIABLES)})")
    return ports


def parse_script(text: str) -> ScriptParts:
    """Read a launch_triton.sh written by specbuild.repository.engine.launch. Raises ScriptFormatError on any other shape."""
    env, ports, segments = {}, {}, []
    lines = text.splitlines()
    try:
        start = lines.index("exec mpirun --allow-run-as-root \\")
    except ValueError:
        raise ScriptFormatError("no 'exec mpirun --allow-run-as-root \\' line") from None
    for line in lines[:start]:
        if m := _PORT_LINE.match(line):
            ports[m.group("var")] = int(m.group("port"))
        elif m := _EXPORT.match(line):
            env[m.group("var")] = m.group("value")
    for line in lines[start + 1 :]:
        if not line.strip():
            continue
        body = line.strip()
        last = not body.endswith(" : \\")
        body = body if last else body[: -len(" : \\")]
        words = shlex.split(body)
        if words[:2] != ["-n", "1"]:
            raise ScriptFormatError(f"app context without '-n 1': {line!r}")
        segments.append(words[2:])
        if last:
            break
    if set(ports) != set(PORT_VARIABLES) or not segments:
        raise ScriptFormatError("missing port defaults or mpirun app contexts")
    return ScriptParts(env, ports, segments)


def expand(words: list[str], values: dict[str, str], extra: list[str]) -> list[str]:
    """Substitute the script's variables in one app context ("$@" -> `extra`). Unknown variables are an error."""
    out = []
    for word in words:
        if word == "$@":
            out += extra
            continue

        def sub(m: re.Match) -> str:
            if m.group(1) not in values:
                raise ScriptFormatError(f"variable ${m.group(1)} in {word!r} is not known to the bundle")
            return values[m.group(1)]

        out.append(re.sub(r"\$([A-Z_]+)", sub, word))
    return out


def exit_timeout(recipe: Recipe) -> list[str]:
    """The arguments the bundle gives the launch script (it passes them to tritonserver, rank 0)."""
    return [f"--exit-timeout-secs={recipe.deploy.exit_timeout_s}"]
