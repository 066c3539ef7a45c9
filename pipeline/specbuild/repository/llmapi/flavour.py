"""The llm-api flavour's half of a runtime: no engine build (the LLM loads Hugging Face checkpoints itself), one
`tensorrt_llm` model configured by model.yaml, and the methods TensorRT-LLM's PyTorch backend has
(TensorRT-LLM tensorrt_llm/llmapi/llm_args.py, main after 1.3.0rc3)."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

from specbuild.files.paths import show
from specbuild.findings import Finding
from specbuild.methods import pack_for
from specbuild.methods.pack import Refusal
from specbuild.repository.llmapi import launch, model_yaml, releases, writer
from specbuild.repository.llmapi.configs import MODEL, gpu_groups
from specbuild.runtimes.base import Runtime


def llmapi_refusal(recipe, spec) -> Refusal | None:
    """Why TensorRT-LLM's LLM API (release llm_api.release) has no such method (None: it has it), as its pack says
    (tensorrt_llm/llmapi/llm_args.py, main after 1.3.0rc3)."""
    if not spec.speculative:
        return None
    answer = pack_for(spec).speculative_config(spec, releases.rules(recipe.llm_api.release).for_packs(), show)
    return answer if isinstance(answer, Refusal) else None


def _release_said(recipe) -> list[str]:
    """Which release line model.yaml is written for and why, and what to know of it (check's first notes)."""
    chosen = recipe.llm_release
    return [f"llm_api.release {chosen.line}: {chosen.why}"] + (
        [f"llm_api.release {chosen.line}: {chosen.note}"] if chosen.note else []
    )


class LlmApiFlavour(Runtime):
    flavour = "llm-api"
    contract = "llm-api"
    bundle = "specbuild.deploy.llmapi_bundle:BUNDLE"

    def flavour_checks(self, recipe, spec) -> Iterator[Finding]:
        yield from recipe.llm_release_findings  # the places that name the release, against each other
        refusal = llmapi_refusal(recipe, spec)
        if refusal is not None:
            yield Finding(
                ("speculation", "method"),
                f"{spec.method} is not in TensorRT-LLM's LLM API ({refusal.why}; tensorrt_llm/llmapi/llm_args.py) "
                f"— use {refusal.instead}",
            )
            return
        b = recipe.build
        if spec.speculative and b.pp_size > 1:
            yield Finding(
                ("build", "pp_size"),
                "speculative decoding cannot be combined with pipeline parallelism "
                "in TensorRT-LLM's PyTorch backend (feature-combination matrix) — set pp_size: 1 and use "
                "tp_size",
            )
        if spec.speculative and b.max_beam_width != 1:
            yield Finding(
                ("build", "max_beam_width"),
                "beam search does not combine with speculative decoding — set max_beam_width: 1",
            )
        yield from pack_for(spec).llmapi_checks(recipe, spec)
        t = recipe.triton
        a = recipe.llm_api
        world = b.tp_size * b.pp_size
        if len(t.gpu_device_ids) not in (world, world * a.instances):
            yield Finding(
                ("triton", "gpu_device_ids"),
                f"lists {len(t.gpu_device_ids)} GPU(s) but each of the "
                f"{a.instances} instance(s) needs tp_size * pp_size = {world}: list {world} (instances "
                f"share them) or {world * a.instances} (one group each)",
                also=(("build", "tp_size"), ("llm_api", "instances")),
            )
        if a.nodes > 1 and a.instances > 1:
            yield Finding(
                ("llm_api", "nodes"),
                "multi-node and multi-instance do not combine (multi-instance runs without MPI) — use one of them",
            )
        if a.nodes > 1 and world % a.nodes:
            yield Finding(
                ("llm_api", "nodes"),
                f"tp_size * pp_size = {world} ranks do not split evenly over "
                f"{a.nodes} nodes — give a world size that is a multiple of the node count",
            )
        refusal = model_yaml.schedule_refusal(spec, a.release)
        if refusal:
            yield Finding(("adaptive", "draft_len_schedule"), refusal, also=(("llm_api", "release"),))
        refusal = model_yaml.disable_below_refusal(spec, a.release)
        if refusal:
            yield Finding(("adaptive", "disable_below"), refusal, also=(("llm_api", "release"),))
        if t.draft_gpu_device_ids is not None:
            yield Finding(
                ("triton", "draft_gpu_device_ids"),
                "the LLM API runs the draft inside the target's process and GPUs — remove it for flavour: llm-api",
            )

    def notes(self, recipe, spec) -> list[str]:
        """What is not known about how llm_api.release parses this model.yaml (`check` prints it, `plan` shows it):
        specbuild writes the spellings it can vouch for and says where it cannot (specbuild.repository.llmapi.releases)."""
        a = recipe.llm_api
        said = _release_said(recipe)
        if not spec.speculative:
            return said
        out = said + [f"llm_api.release {a.release}: {unknown}" for unknown in releases.rules(a.release).unknown]
        if spec.draft_len_schedule and releases.schedule_unknown(a.release):
            out.append(f"llm_api.release {a.release}: {releases.schedule_unknown(a.release)}")
        gate = model_yaml.disable_below_unknown(spec, a.release)
        if gate:
            out.append(f"llm_api.release {a.release}: {gate}")
        return out

    # --- engines: none ---------------------------------------------------------------------------------------
    def engine_roles(self, recipe, spec) -> list[str]:
        return []

    def engine_steps(self, recipe, spec, roles, layout, options) -> list:
        return []

    def build_engines(self, steps, recipe, layout, progress=None, notice=None) -> dict[str, Path]:
        return {}

    def owns_engine(self, config: dict) -> bool:
        return False

    # --- repository -------------------------------------------------------------------------------------------
    def model_files(self) -> dict[str, Path]:
        """The files of `tensorrt_llm/1/` besides model.yaml: name -> source path."""
        raise NotImplementedError

    model_files_label: str = ""

    def serving_model(self, spec) -> str:
        return MODEL

    def repository_info(self, recipe, spec, layout, role):
        info = {
            "backend": "python",
            "model.py": self.model_files_label,
            "decoupled": recipe.triton.streaming,
            "instances": recipe.llm_api.instances,
        }
        if recipe.llm_api.instances > 1:
            info["gpu_device_ids"] = ";".join(",".join(map(str, g)) for g in gpu_groups(recipe))
        out = {
            "TensorRT-LLM release": recipe.llm_release.said,
            "serve requests at": MODEL,
            "models": {MODEL: info},
            "model.yaml": model_yaml.model_yaml(recipe, spec, role=role, path=show),
        }
        notes = self.notes(recipe, spec) if role == "target" else []
        notes = notes[len(_release_said(recipe)) :]  # (which release and why: said above)
        if notes:
            out["not known"] = notes
        return out

    def write_repository(self, recipe, spec, layout, role, progress=None, notice=None, engines_built=True) -> Path:
        return writer.write_repository(recipe, spec, layout, role, self.model_files(), progress=progress, notice=notice)

    # --- serving ----------------------------------------------------------------------------------------------
    def launcher(self, repository: Path) -> Path | None:
        return repository / launch.SCRIPT_NAME
