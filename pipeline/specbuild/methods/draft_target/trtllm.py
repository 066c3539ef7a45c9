"""Draft-target's part of the tensorrt-llm runtime (specbuild/trtllm/method_part.py): logit acceptance gathers the
engines' generation logits, the draft engine's GPUs and architecture."""

from __future__ import annotations

from typing import Iterator

from specbuild.checkpoints.checkpoint_files import architecture
from specbuild.findings import Finding
from specbuild.trtllm.converters import TRTLLM_MODEL_CLASSES
from specbuild.trtllm.method_part import TrtllmPart


class DraftTargetTrtllm(TrtllmPart):
    doctor_section = {"checkpoint": "draft", "use_draft_logits": True}

    def build_flags(self, spec, role) -> dict[str, str | None]:
        if spec.params.use_draft_logits and role in ("target", "draft"):
            return {"--gather_generation_logits": None}  # logit acceptance (TensorRT-LLM PR #4167)
        return {}

    def checks(self, recipe, spec, options) -> Iterator[Finding]:
        draft, t = spec.params, recipe.triton
        ids = recipe.draft_gpu_device_ids
        if len(ids) != draft.tp_size:
            where = ("triton", "draft_gpu_device_ids") if t.draft_gpu_device_ids else ("speculation", "tp_size")
            yield Finding(
                where,
                f"the draft has tp_size {draft.tp_size} but {len(ids)} GPU id(s) "
                f"({ids}) — give triton.draft_gpu_device_ids with {draft.tp_size} id(s)",
            )

    def file_checks(self, recipe, spec) -> Iterator[Finding]:
        draft_arch = architecture(spec.params.path)
        if draft_arch is not None and draft_arch not in TRTLLM_MODEL_CLASSES:
            supported = ", ".join(sorted(TRTLLM_MODEL_CLASSES))
            yield Finding(
                ("speculation", "checkpoint"),
                f"the draft's architecture {draft_arch} has no TensorRT-LLM "
                f"engine-path class known to specbuild (supported: {supported}) — pick a supported draft",
            )


PART = DraftTargetTrtllm()
