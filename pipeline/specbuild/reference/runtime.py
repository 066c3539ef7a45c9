"""The reference runtime: specbuild's own CPU implementation of every method (PyTorch, transformers models).

Its engine folders have the TensorRT-LLM config.json shape (reference/engine_folder.py); its Triton core model is
a Python-backend model with the `tensorrt_llm` model's name, tensors and parameters
(reference/core_models/engine/model.py), served by the CPU tritonserver of nvidia-pytriton.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

from specbuild.facts.engine_facts import verify_engine
from specbuild.findings import Finding
from specbuild.plan import ServeStep
from specbuild.reference.call_costs import measure_served
from specbuild.reference.checks import decoder_refusal, reference_findings
from specbuild.reference.engine_folder import build_engine
from specbuild.reference.steps import ReferenceEngineStep, cpu_serve_step
from specbuild.repository.engine.flavour import EngineFlavour

CORE_MODEL = Path(__file__).resolve().parent / "core_models" / "engine" / "model.py"


class ReferenceRuntime(EngineFlavour):
    name = "reference"
    summary = "specbuild's CPU PyTorch implementation of every method, served by the CPU tritonserver"
    core_backend = "python"
    core_backend_label = "python (specbuild reference)"
    follows_draft_len_schedule = True
    honours_stream_interval = True
    bundle_refusal = (
        "the reference runtime serves on CPU with `specbuild serve`; bundles run TensorRT-LLM in "
        "NVIDIA's tritonserver image (runtime: tensorrt-llm)"
    )

    # --- checks -----------------------------------------------------------------------------------------------
    def checks(self, recipe, spec, options) -> Iterator[Finding]:
        yield from self.flavour_checks(recipe, spec)
        yield from reference_findings(recipe, spec)
        refusal = decoder_refusal(spec) if spec.mode is not None else None  # (no engine mode: the flavour's refusal)
        if refusal is not None:
            yield Finding(("speculation", "method"), refusal)

    # --- engines ----------------------------------------------------------------------------------------------
    def engine_steps(self, recipe, spec, roles, layout, options) -> list[ReferenceEngineStep]:
        return [
            ReferenceEngineStep(
                role=role.name,
                model_dir=role.model_dir,
                tokenizer_dir=role.tokenizer_dir,
                method=role.method,
                mode=role.limits.speculative_decoding_mode,
                dtype=recipe.model.dtype,
                limits=role.limits,
                weights=role.weights,
                decoding=role.decoding,
                pretrained_extra=role.pretrained,
                output=layout.engine(role.name),
            )
            for role in roles.values()
        ]

    def build_engines(self, steps, recipe, layout, progress=None, notice=None) -> dict[str, Path]:
        built = {}
        for step in steps:
            if progress:
                progress(f"{step.role} engine")
            build_engine(
                step.output,
                role=step.role,
                method=step.method,
                mode=step.mode,
                decoding=step.decoding,
                model_dir=step.model_dir,
                tokenizer_dir=step.tokenizer_dir,
                extra_dirs=step.weights,
                dtype=step.dtype,
                limits=step.limits,
                pretrained_extra=step.pretrained_extra,
                progress=progress,
                notice=notice,
            )
            verify_engine(step.output, step.limits, step.role, after="rebuild it with specbuild compile")
            built[step.role] = step.output
        return built

    # --- repository and serving -------------------------------------------------------------------------------
    def core_model_files(self) -> dict[str, Path]:
        return {"model.py": CORE_MODEL}

    def serve_step(self, recipe, spec, layout, repo_roles) -> ServeStep:
        return cpu_serve_step(recipe, layout, repo_roles)

    def owns_engine(self, config: dict) -> bool:
        return (config.get("specbuild") or {}).get("runtime") == self.name

    def call_costs(self, configs, texts, max_tokens, levels, progress=None):
        return measure_served(configs, texts, max_tokens, levels, progress)
