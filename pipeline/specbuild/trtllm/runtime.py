"""The tensorrt-llm runtime (engine flavour): TensorRT-LLM checkpoints and `trtllm-build` engines on a GPU,
served by Triton's C++ `tensorrtllm` backend through the repository's launch_triton.sh.

tensorrt_llm is never imported here: conversions run in child processes (convert_worker), builds are the
`trtllm-build` console script, and the installed version comes from package metadata (version.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

from specbuild.facts.engine_facts import SpecMode
from specbuild.findings import Finding
from specbuild.files.paths import show
from specbuild.plan import ServeStep, Step, VerifyEngineStep
from specbuild.repository.engine import params as triton_params
from specbuild.repository.engine.flavour import EngineFlavour
from specbuild.repository.engine.launch import SCRIPT_NAME, launch_script
from specbuild.runtimes.roles import Role
from specbuild.trtllm import checks
from specbuild.trtllm.converters import plain_converter
from specbuild.trtllm.method_part import part_for, target_converter
from specbuild.trtllm.engines import run_engine_steps
from specbuild.trtllm.steps import BuildStep, ConvertStep
from specbuild.trtllm.version import installed_version, legacy_tensor_names


def build_flags(recipe, spec, role: Role) -> tuple[tuple[str, str | None], ...]:
    """Every trtllm-build flag after --checkpoint_dir/--output_dir, explicit (tensorrt_llm/commands/build.py), for
    the engine of `role` (its limits as the build resolved them)."""
    limits = role.limits
    b = recipe.build
    flags: dict[str, str | None] = {
        "--max_batch_size": str(b.max_batch_size),
        "--max_input_len": str(b.max_input_len),
        "--max_seq_len": str(b.max_seq_len),  # trtllm-build adds max_draft_len (+num_eagle_layers) itself
        "--max_num_tokens": str(limits.max_num_tokens),
        "--max_beam_width": str(b.max_beam_width),
        "--gemm_plugin": recipe.gemm_plugin,
        "--gpt_attention_plugin": recipe.model.dtype,
        "--context_fmha": "enable",
        "--use_paged_context_fmha": "enable" if b.use_paged_context_fmha else "disable",
        "--remove_input_padding": "enable",
        "--kv_cache_type": b.kv_cache_type,
        "--tokens_per_block": str(b.tokens_per_block),
        "--workers": str(b.workers),
    }
    if limits.speculative_decoding_mode != SpecMode.NONE:
        flags["--speculative_decoding_mode"] = limits.speculative_decoding_mode.cli_name
        flags["--max_draft_len"] = str(limits.max_draft_len)
    flags.update(part_for(spec).build_flags(spec, role.name))
    return tuple(flags.items())


class TrtllmRuntime(EngineFlavour):
    name = "tensorrt-llm"
    summary = "TensorRT-LLM engines (trtllm-build) served by Triton's tensorrtllm backend on NVIDIA GPUs"
    core_backend = "tensorrtllm"
    core_backend_label = "tensorrtllm"

    def checks(self, recipe, spec, options) -> Iterator[Finding]:
        yield from self.flavour_checks(recipe, spec)
        yield from checks.recipe_findings(recipe, spec, options)

    def file_checks(self, recipe, spec, options) -> Iterator[Finding]:
        return checks.file_findings(recipe, spec)

    def sampling_refusal(self, spec) -> str | None:
        return checks.sampling_refusal(spec)

    # --- engines ----------------------------------------------------------------------------------------------
    def engine_steps(self, recipe, spec, roles, layout, options) -> list[Step]:
        steps: list[Step] = []
        for role in roles.values():
            reuse_target_ckpt = role.name == "baseline" and not spec.weights
            ckpt_role = "target" if reuse_target_ckpt else role.name
            if not reuse_target_ckpt:
                steps.append(self._convert_step(recipe, spec, layout, role, options.trtllm_examples))
            steps.append(
                BuildStep(
                    role=role.name,
                    checkpoint=layout.checkpoint(ckpt_role),
                    output=layout.engine(role.name),
                    flags=build_flags(recipe, spec, role),
                )
            )
            steps.append(
                VerifyEngineStep(
                    role=role.name, engine=layout.engine(role.name), recipe_name=recipe.name, expect=role.limits
                )
            )
        return steps

    def _convert_step(self, recipe, spec, layout, role: Role, examples: str | None) -> ConvertStep:
        b = recipe.build
        draft = spec.params if role.name == "draft" else None  # the DraftModel (a draft role is its only)
        if role.name == "target":
            converter = target_converter(recipe, spec, examples)
        else:
            converter = plain_converter(role.model_dir)
        expect = {"dtype": recipe.model.dtype}
        expect.update({k: v for k, v in role.pretrained.items() if not isinstance(v, (dict, list))})
        return ConvertStep(
            role=role.name,
            converter=converter,
            model_dir=role.model_dir,
            output=layout.checkpoint(role.name),
            dtype=recipe.model.dtype,
            tp_size=draft.tp_size if draft else b.tp_size,
            pp_size=1 if draft else b.pp_size,
            workers=b.workers,
            quantization=b.quantization,
            trust_remote_code=recipe.model.trust_remote_code,
            examples=Path(examples) if converter.via == "script" else None,
            expect=expect,
        )

    def build_engines(self, steps, recipe, layout, progress=None, notice=None) -> dict[str, Path]:
        return run_engine_steps(steps, recipe, layout, progress, notice)

    # --- repository and serving -------------------------------------------------------------------------------
    def repository_files(self, recipe, spec, role: str) -> dict[str, str]:
        return {SCRIPT_NAME: launch_script(recipe, spec, role)}

    def serve_step(self, recipe, spec, layout, repo_roles) -> ServeStep:
        info = triton_params.launch(recipe, "target", spec)
        return ServeStep(
            headline=f"launch tritonserver in {info['mode']} mode (world size {info['world_size']})",
            argv=("bash", show(layout.repository() / SCRIPT_NAME)),
            info={k: v for k, v in info.items() if k != "mode"},
        )

    def legacy_tensor_names(self) -> bool:
        """The tensor names of the installed backend (triton.legacy_tensor_names None): the <= 0.19 ones when
        TensorRT-LLM 0.17-0.19 is installed, the current ones otherwise (also when none is installed here)."""
        return bool(legacy_tensor_names())

    def launcher(self, repository: Path) -> Path | None:
        return repository / SCRIPT_NAME

    def installed_release(self) -> str | None:
        return installed_version()

    def owns_engine(self, config: dict) -> bool:
        # TensorRT-LLM writes no specbuild section; a reference engine records its runtime there
        return (config.get("specbuild") or {}).get("runtime", self.name) == self.name
