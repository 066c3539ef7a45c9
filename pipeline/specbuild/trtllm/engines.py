"""Execute the tensorrt-llm runtime's engine steps: convert -> trtllm-build -> verify, per role.

Before anything runs: TensorRT-LLM 0.17 <= version <= 1.3.0rc20 is installed and an NVIDIA GPU of compute capability
>= 8.0 is present (>= 8.9 for FP8), every trtllm-build command is accepted by the installed tool and every
example script exists. Every failure is a UserError that names the step, shows the tool's last lines and the
command to rerun by hand; nothing half-written stays under engines/ (specbuild.files.atomic).
"""

from __future__ import annotations

from pathlib import Path

from specbuild.facts.engine_facts import verify_engine
from specbuild.plan import Layout, Step, VerifyEngineStep
from specbuild.recipe.schema import Recipe
from specbuild.trtllm.build import accepted_flags, check_flags, run_build
from specbuild.trtllm.convert import run_convert, script_exists
from specbuild.trtllm.gpus import require_gpus
from specbuild.trtllm.help_flags import HelpFlags
from specbuild.trtllm.proc import Progress, sigterm_raises
from specbuild.trtllm.steps import BuildStep, ConvertStep
from specbuild.trtllm.version import require_trtllm


def preflight(steps: list[Step], version: str, flags_cache: dict[str, HelpFlags], progress: Progress | None) -> None:
    """Fail before the first (slow) conversion. The flags are checked again right before each build."""
    for step in steps:
        if isinstance(step, BuildStep):
            argv = step.command()
            check_flags(argv, accepted_flags(argv, flags_cache, progress), version)
        elif isinstance(step, ConvertStep) and step.converter.via == "script":
            script_exists(step)


def run_engine_steps(
    steps: list[Step], recipe: Recipe, layout: Layout, progress: Progress | None = None, notice=None
) -> dict[str, Path]:
    """Run the convert/build/verify-engine steps; returns {role: engine folder} for every engine built."""
    install = require_trtllm()
    if progress:
        progress(f"TensorRT-LLM {install.version}")
    gpus = require_gpus(need_fp8=recipe.build.quantization == "fp8")
    if progress:
        progress("; ".join(str(g) for g in gpus))
    flags_cache: dict[str, HelpFlags] = {}
    preflight(steps, install.version, flags_cache, progress)
    built: dict[str, Path] = {}
    with sigterm_raises():
        for step in steps:
            if isinstance(step, ConvertStep):
                run_convert(step, log_dir=layout.logs, progress=progress, notice=notice)
            elif isinstance(step, BuildStep):
                run_build(
                    step,
                    version=install.version,
                    flags_cache=flags_cache,
                    log_dir=layout.logs,
                    progress=progress,
                    notice=notice,
                )
                built[step.role] = step.output
            elif isinstance(step, VerifyEngineStep):
                verify_engine(
                    step.engine,
                    step.expect,
                    step.role,
                    after=(
                        "this TensorRT-LLM built something else than the command asked for; the engine is left for "
                        "inspection and will be rebuilt by the next specbuild compile. Check `specbuild doctor` and the "
                        f"build log in {layout.logs}"
                    ),
                )
                if progress:
                    progress(f"{step.role}: engine verified ({step.engine})")
    return built
