"""Execute the TensorRT-LLM engine steps of a plan: convert -> trtllm-build -> verify, per role.

    from specbuild.trtllm import build_engines
    engines = build_engines(plan, recipe, layout, progress=status.update)   # {"target": Path, ...}

Before anything runs: TensorRT-LLM 0.17 <= version < 1.3 is installed and an NVIDIA GPU of compute capability
>= 8.0 is present (>= 8.9 for FP8). Every failure is a UserError that names the step, shows the tool's last lines
and the command to rerun by hand; nothing half-written stays under engines/.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from specbuild.errors import UserError
from specbuild.methods import method_for
from specbuild.plan import Layout, Plan, roles
from specbuild.recipe.schema import Recipe
from specbuild.trtllm.build import accepted_flags, check_flags, run_build
from specbuild.trtllm.convert import run_convert, script_argv
from specbuild.trtllm.gpus import require_gpus
from specbuild.trtllm.help_flags import HelpFlags
from specbuild.trtllm.proc import Progress, sigterm_raises
from specbuild.trtllm.verify import verify_engine
from specbuild.trtllm.version import require_trtllm

ENGINE_STEPS = ("convert", "build", "verify-engine")


def world_size(recipe: Recipe, role: str) -> int:
    if role == "draft":
        return recipe.speculation.tp_size  # the draft is converted with pp_size 1 (plan._convert_step)
    return recipe.build.tp_size * recipe.build.pp_size


def checkpoint_expect(recipe: Recipe, role: str) -> dict[str, Any]:
    """config.json keys a converted checkpoint must carry (engine fact sheet §3.1)."""
    expect: dict[str, Any] = {"dtype": recipe.model.dtype}
    if role == "target":
        extra = method_for(recipe).pretrained_extra(recipe)
        expect.update({k: v for k, v in extra.items() if not isinstance(v, (dict, list))})
    return expect


def preflight(plan: Plan, version: str, flags_cache: dict[str, HelpFlags], progress: Progress | None) -> None:
    """Fail before the first (slow) conversion: every trtllm-build command is accepted by the installed tool and
    every example script exists. The flags are checked again right before each build."""
    for step in plan.steps:
        if step.kind == "build":
            check_flags(step.command, accepted_flags(step.command, flags_cache, progress), version)
        elif step.kind == "convert" and step.command:
            script_argv(step, Path("unused"))


def build_engines(plan: Plan, recipe: Recipe, layout: Layout, progress: Progress | None = None) -> dict[str, Path]:
    """Run the plan's convert/build/verify-engine steps; returns {role: engine folder} for every role built."""
    if recipe.runtime != "tensorrt-llm":
        raise UserError(f"build_engines builds TensorRT-LLM engines but the recipe says runtime: {recipe.runtime}")
    install = require_trtllm()
    if progress:
        progress(f"TensorRT-LLM {install.version}")
    gpus = require_gpus(need_fp8=recipe.build.quantization == "fp8")
    if progress:
        progress("; ".join(str(g) for g in gpus))
    log_dir = layout.engines_root / layout.name / "logs"
    flags_cache: dict[str, HelpFlags] = {}
    preflight(plan, install.version, flags_cache, progress)
    with sigterm_raises():
        for step in plan.steps:
            if step.kind not in ENGINE_STEPS:
                continue
            role = step.role or "target"
            if step.kind == "convert":
                run_convert(step, layout.checkpoint(role), world_size=world_size(recipe, role),
                            expect=checkpoint_expect(recipe, role), log_dir=log_dir, progress=progress)
            elif step.kind == "build":
                run_build(step, layout.engine(role), version=install.version, flags_cache=flags_cache,
                          log_dir=log_dir, progress=progress)
            else:
                verify_engine(layout.engine(role), step.details["expect"], role)
                if progress:
                    progress(f"{role}: engine verified ({layout.engine(role)})")
    return {role: layout.engine(role) for role in roles(recipe)}
