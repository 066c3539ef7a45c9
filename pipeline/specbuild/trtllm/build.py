"""The plan's `build` steps: `trtllm-build` as a child process, checked against `--help` first, built atomically."""

from __future__ import annotations

import json
import shlex
import shutil
from pathlib import Path

from specbuild.files import atomic
from specbuild.errors import UserError
from specbuild.files.paths import show
from specbuild.trtllm.convert import child_env
from specbuild.trtllm.help_flags import HelpFlags, read_help
from specbuild.trtllm.proc import Progress, run_child
from specbuild.trtllm.steps import BuildStep


def resolve_tool(name: str) -> str:
    exe = shutil.which(name)
    if exe is None:
        raise UserError(
            f"{name} is not on PATH — it is a console script of the TensorRT-LLM wheel (pip install "
            '"tensorrt_llm>=0.17,<=1.3.0rc20"); activate the environment that has it, or run in the NGC '
            "tritonserver:<yy.mm>-trtllm-python-py3 container"
        )
    return exe


def check_flags(argv: list[str], flags: HelpFlags, version: str) -> None:
    problems = flags.problems(argv)
    if problems:
        listed = "\n".join(f"  {p}" for p in problems)
        raise UserError(
            f"the installed trtllm-build (TensorRT-LLM {version}, {flags.tool}) does not accept the command "
            f"specbuild is about to run:\n{listed}\n— install a TensorRT-LLM release specbuild supports "
            f'(pip install "tensorrt_llm>=0.17,<=1.3.0rc20") or change the recipe value; `specbuild doctor` '
            "lists what this installation accepts"
        )


def checkpoint_world_size(checkpoint: Path) -> int:
    try:
        cfg = json.loads((checkpoint / "config.json").read_text())
        return int(cfg["mapping"]["world_size"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise UserError(
            f"{show(checkpoint)}/config.json is missing or has no mapping.world_size ({e}) — the "
            "conversion step did not finish; rerun specbuild compile"
        ) from None


def accepted_flags(argv: list[str], flags_cache: dict[str, HelpFlags], progress: Progress | None = None) -> HelpFlags:
    """What the trtllm-build that argv would run accepts (its --help, read once per executable)."""
    exe = resolve_tool(argv[0])
    if exe not in flags_cache:
        if progress:
            progress(f"reading {exe} --help")
        flags_cache[exe] = read_help(exe, env=child_env())
    return flags_cache[exe]


def run_build(
    step: BuildStep,
    *,
    version: str,
    flags_cache: dict[str, HelpFlags],
    log_dir: Path,
    progress: Progress | None = None,
    notice: atomic.Notice | None = None,
) -> Path:
    """Execute one build step into step.output (atomically). Returns the folder."""
    role = step.role or "target"
    shown = step.command()
    flags = accepted_flags(shown, flags_cache, progress)
    check_flags(shown, flags, version)
    world = checkpoint_world_size(step.checkpoint)
    log = log_dir / f"build-{role}.log"
    with atomic.atomic_folder(step.output, notice) as tmp:
        if progress:
            progress(f"{role}: {step.title()}")
        result = run_child(
            step.build_argv(flags.tool, tmp), log, progress=progress, prefix=f"{role} build: ", env=child_env()
        )
        if result.returncode != 0:
            raise UserError(
                f"trtllm-build of the {role} engine {result.failure}; last lines:\n{result.tail()}\n"
                f"full log: {show(log)}\nto rerun by hand: {shlex.join(shown)}"
            )
        missing = [n for n in ["config.json", *(f"rank{r}.engine" for r in range(world))] if not (tmp / n).is_file()]
        if missing:
            raise UserError(
                f"trtllm-build exited 0 but wrote no {', '.join(missing)} for the {role} engine — see "
                f"{show(log)}; to rerun by hand: {shlex.join(shown)}"
            )
    return step.output
