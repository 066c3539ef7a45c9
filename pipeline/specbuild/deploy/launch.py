"""What a bundle's containers run: the repository's own launch command, one function per launch kind.

Kind "engine" (TensorRT engines, the `tensorrtllm` C++ backend): the repository's `launch_triton.sh`
(specbuild.triton.launch), which execs `mpirun` with one `tritonserver` per rank (leader mode) or the orchestrator.
- Kubernetes runs exactly `bash <repo>/launch_triton.sh --exit-timeout-secs=T`; across nodes the leader first
  writes the group's hostfile, then execs the same command (mpirun reaches the workers through kubessh).
- Slurm starts the ranks itself (`srun --mpi=pmix`, NVIDIA's leader-mode Slurm launch, fact sheet §2.4): each task
  runs its rank's segment of the script's mpirun line, read from the script text, so the two cannot drift.
  A spawning orchestrator (one rank) runs the script itself instead.

The LLM-API flavour (`trtllm-llmapi-launch`) becomes a second entry of LAUNCH_KINDS.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from specbuild.triton.launch import SCRIPT_NAME, launch_script

if TYPE_CHECKING:
    from specbuild.recipe.schema import Recipe

IMAGE_TRITONSERVER = "/opt/tritonserver/bin/tritonserver"  # the script's default TRITONSERVER (NGC layout)
PORT_VARIABLES = ("HTTP_PORT", "GRPC_PORT", "METRICS_PORT")


@dataclass(frozen=True)
class LaunchPlan:
    kind: str
    script: Path  # the repository's launch script
    container_argv: list[str]  # the serving container's command (the leader execs it last)
    rank_argv: list[list[str]]  # per MPI rank, as the script's mpirun line runs it (image paths)
    env: dict[str, str] = field(default_factory=dict)  # variables the script exports before mpirun
    ports: dict[str, int] = field(default_factory=dict)  # HTTP_PORT/GRPC_PORT/METRICS_PORT defaults of the script
    tasks_run_script: bool = False  # Slurm: the single task runs the script (spawning orchestrator) not a rank


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


def parse_script(text: str) -> ScriptParts:
    """Read a launch_triton.sh written by specbuild.triton.launch. Raises ScriptFormatError on any other shape."""
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
    for line in lines[start + 1:]:
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


def engine_launch(recipe: Recipe, repository: Path) -> LaunchPlan:
    from specbuild.triton import params

    script = repository / SCRIPT_NAME
    extra = [f"--exit-timeout-secs={recipe.deploy.exit_timeout_s}"]
    parts = parse_script(launch_script(recipe, "target"))
    info = params.launch(recipe, "target")
    spawn = info["mode"] == "orchestrator" and not info.get("disable_spawn_processes", False)
    values = {"TRITONSERVER": IMAGE_TRITONSERVER, "REPO": str(repository),
              **{k: str(v) for k, v in parts.ports.items()}}
    ranks = [] if spawn else [expand(seg, values, extra) for seg in parts.segments]
    return LaunchPlan("engine", script, ["bash", str(script), *extra], ranks, parts.env, parts.ports,
                      tasks_run_script=spawn)


LAUNCH_KINDS: dict[str, Callable[[Recipe, Path], LaunchPlan]] = {"engine": engine_launch}


def launch_kind(recipe: Recipe) -> str:
    """The launch kind of a recipe: its flavour (specbuild.runtimes)."""
    from specbuild.runtimes import runtime_for

    return runtime_for(recipe).flavour


def launch_plan(recipe: Recipe, repository: Path) -> LaunchPlan:
    return LAUNCH_KINDS[launch_kind(recipe)](recipe, repository)
