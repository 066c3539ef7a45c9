"""The engine flavour's half of a runtime: engine folders (target, draft, baseline) served through the
ensemble/BLS repository of specbuild/repository/engine/ (both runtimes: only the core model's backend and model.py
differ)."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

from specbuild.findings import Finding
from specbuild.repository.engine import plan_info, writer
from specbuild.repository.engine.core import EngineCore
from specbuild.repository.engine.speculation_params import bls_drafts
from specbuild.runtimes.base import Runtime
from specbuild.runtimes.roles import role_names


class EngineFlavour(Runtime, EngineCore):
    flavour = "engine"
    contract = "engine"
    bundle = "specbuild.deploy.engine_bundle:BUNDLE"
    # The core model follows a draft_len_schedule for the methods drafted inside the engine (Medusa, EAGLE):
    # the reference core does (parameter draft_len_schedule); the C++ executor has no such option.
    follows_draft_len_schedule: bool = False
    # Whether the core streams a response every triton.stream_interval steps (the reference core's parameter
    # stream_interval); the C++ backend sends one per executor response (inflight_batcher_llm/src/
    # model_instance_state.cc) and has no such parameter.
    honours_stream_interval: bool = False

    def flavour_checks(self, recipe, spec) -> Iterator[Finding]:
        if spec.mode is None:
            yield Finding(
                ("speculation", "method"),
                f"{spec.method} exists only in the llm-api flavour: "
                "TensorRT-LLM's engine path (trtllm-build) has no such mode — set flavour: llm-api",
            )
        if spec.draft_len_schedule and not bls_drafts(spec) and not self.follows_draft_len_schedule:
            yield Finding(
                ("adaptive", "draft_len_schedule"),
                f"the {self.core_backend_label} core drafts "
                f"{spec.method} inside the engine with a fixed tree: the engine path's executor has no "
                "draft length per batch size (TensorRT-LLM has draft_len_schedule in its LLM API only) — "
                "remove adaptive, use flavour: llm-api, or a method our BLS drafts (draft_target, "
                "prompt_lookup), which follows the schedule",
                also=(("speculation", "method"),),
            )
        if spec.disable_below is not None:
            yield Finding(
                ("adaptive", "disable_below"),
                "the engine path has no acceptance-rate switch: TensorRT-LLM turns speculation off on poor "
                "acceptance in its PyTorch executor only (acceptance_rate_threshold / acceptance_rate_window_size, "
                "'PyTorch backend only': tensorrt_llm/llmapi/llm_args.py@0004396), not in the C++ executor the "
                "engine flavour serves through — remove adaptive.disable_below, or use flavour: llm-api",
            )
        interval = recipe.triton.stream_interval
        if interval != 1 and not self.honours_stream_interval:
            yield Finding(
                ("triton", "stream_interval"),
                f"is {interval}, but the {self.core_backend_label} core of "
                "the engine path streams one response per decoding step: the C++ backend has no stream "
                "interval (TensorRT-LLM has stream_interval in its LLM API only) — remove stream_interval, "
                "or use flavour: llm-api",
            )
        elif interval != 1 and bls_drafts(spec):
            yield Finding(
                ("triton", "stream_interval"),
                f"is {interval}, but {spec.method} is served by "
                "tensorrt_llm_bls, which streams one response per speculative round — remove "
                "stream_interval, or use a method the core drafts (eagle, medusa, lookahead)",
                also=(("speculation", "method"),),
            )

    def engine_roles(self, recipe, spec) -> list[str]:
        return role_names(recipe, spec)

    def repository_info(self, recipe, spec, layout, role):
        return plan_info.repository_info(recipe, spec, self, layout, role, self.serving_model(spec))

    def write_repository(self, recipe, spec, layout, role, progress=None, notice=None, engines_built=True) -> Path:
        return writer.write_repository(
            recipe, spec, layout, role, progress=progress, notice=notice, engines_built=engines_built, flavour=self
        )

    def serving_model(self, spec) -> str:
        """The BLS for the methods it drafts, else the ensemble."""
        return "tensorrt_llm_bls" if bls_drafts(spec) else "ensemble"
