"""The llm-api flavour's half of a runtime: no engine build (the LLM loads Hugging Face checkpoints itself), one
`tensorrt_llm` model configured by model.yaml, and the methods TensorRT-LLM's PyTorch backend has
(TensorRT-LLM tensorrt_llm/llmapi/llm_args.py, main after 1.3.0rc3)."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

from specbuild.repository.llmapi import launch, model_yaml, releases, writer
from specbuild.repository.llmapi.model_yaml import RELEASES_WITH_LAYER_CHOICE
from specbuild.repository.llmapi.configs import MODEL, gpu_groups
from specbuild.findings import Finding
from specbuild.files.paths import show
from specbuild.runtimes.base import Runtime
from specbuild.speculation import DraftModel, Eagle3Head

# Methods the PyTorch backend does not have, and why (tensorrt_llm/llmapi/llm_args.py, main after 1.3.0rc3)
MISSING = {
    "medusa": "Medusa's supports_backend returns False for pytorch",
    "lookahead": "Lookahead's supports_backend returns False for pytorch",
    "eagle": "the PyTorch backend reads `Eagle` as EAGLE-3, and EAGLE-1/2 heads are incompatible",
}
SUGGEST = {
    "medusa": "flavour: engine",
    "lookahead": "flavour: engine, or method: prompt_lookup",
    "eagle": "method: eagle3 with an EAGLE-3 head, or flavour: engine",
}


def _draft_findings(spec, draft: DraftModel) -> Iterator[Finding]:
    """What the LLM API's Draft_Target cannot honour of a draft-target section."""
    for key, value, why in (
        (
            "use_draft_logits",
            draft.use_draft_logits,
            "the LLM API's draft/target has no logit-acceptance option (it samples with the TorchSampler)",
        ),
        ("fast_logits", draft.fast_logits, "fast logits is an engine-path orchestrator transfer"),
        (
            "tp_size",
            draft.tp_size != 1,
            "the LLM API runs the draft with the target's parallelism; a separate draft tp_size does not exist there",
        ),
    ):
        if value:
            yield Finding(("speculation", key), f"{why} — remove it for flavour: llm-api")
    if draft.num_draft_tokens != spec.max_draft_len:
        yield Finding(
            ("speculation", "num_draft_tokens"),
            f"is {draft.num_draft_tokens} but max_draft_len "
            f"is {spec.max_draft_len}; the LLM API drafts exactly max_draft_len tokens per step — "
            "give one value (set both equal)",
        )


class LlmApiFlavour(Runtime):
    flavour = "llm-api"
    contract = "llm-api"

    def flavour_checks(self, recipe, spec) -> Iterator[Finding]:
        if spec.method in MISSING:
            yield Finding(
                ("speculation", "method"),
                f"{spec.method} is not in TensorRT-LLM's LLM API ("
                f"{MISSING[spec.method]}; tensorrt_llm/llmapi/llm_args.py) — use {SUGGEST[spec.method]}",
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
        if isinstance(spec.params, DraftModel):
            yield from _draft_findings(spec, spec.params)
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
        if (
            isinstance(spec.params, Eagle3Head)
            and spec.params.layers_to_capture is not None
            and a.release not in RELEASES_WITH_LAYER_CHOICE
        ):
            yield Finding(
                ("speculation", "layers_to_capture"),
                f"TensorRT-LLM {a.release} has no "
                "eagle3_layers_to_capture (it arrived in 1.1; 1.0 captures {1, L//2-1, L-4}) — remove it, "
                "or set llm_api.release to the 1.1+ release you run",
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
        if not spec.speculative:
            return []
        out = [f"llm_api.release {a.release}: {unknown}" for unknown in releases.rules(a.release).unknown]
        if spec.draft_len_schedule and releases.schedule_unknown(a.release):
            out.append(f"llm_api.release {a.release}: {releases.schedule_unknown(a.release)}")
        gate = model_yaml.disable_below_unknown(spec, a.release)
        if gate:
            out.append(f"llm_api.release {a.release}: {gate}")
        return out

    # --- engines: none ---------------------------------------------------------------------------------------
    def engine_roles(self, recipe, spec) -> list[str]:
        return []

    def engine_steps(self, recipe, spec, layout, options) -> list:
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
            "serve requests at": MODEL,
            "models": {MODEL: info},
            "model.yaml": model_yaml.model_yaml(recipe, spec, role=role, path=show),
        }
        notes = self.notes(recipe, spec) if role == "target" else []
        if notes:
            out["not known"] = notes
        return out

    def write_repository(self, recipe, spec, layout, role, progress=None, notice=None, engines_built=True) -> Path:
        return writer.write_repository(recipe, spec, layout, role, self.model_files(), progress=progress, notice=notice)

    # --- serving ----------------------------------------------------------------------------------------------
    def launcher(self, repository: Path) -> Path | None:
        return repository / launch.SCRIPT_NAME
