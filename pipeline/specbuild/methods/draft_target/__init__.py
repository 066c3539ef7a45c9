"""Draft-target (speculative sampling): a small draft model proposes tokens that the target verifies.

Two engines: the draft is a plain build; the target is built with draft_tokens_external (TensorRT-LLM
examples/draft_target_model/README.md). On Triton the BLS runs the loop: draft call, then a target call carrying
draft_input_ids (TensorRT-LLM triton_backend/all_models/inflight_batcher_llm/tensorrt_llm_bls/1/lib/decode.py@4db6828).
The pack: this section, params.py, the BLS's and model.yaml's parameters and the CPU rehearsal's reading here,
decoder.py (reference), trtllm.py (TensorRT-LLM).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator, Literal

from pydantic import model_validator

from specbuild.facts.bounds import PositiveInt32
from specbuild.checkpoints.checkpoint_tensors import CAUSAL_LM
from specbuild.facts.engine_facts import SpecMode
from specbuild.methods import preflight
from specbuild.findings import Finding
from specbuild.methods.draft_target.params import DraftModel
from specbuild.methods.llm_args import WithDraftModel
from specbuild.methods.pack import MethodPack, Rehearsed, Unservable
from specbuild.section import Section
from specbuild.checkpoints.checkpoint_files import read_hf_config
from specbuild.methods.preflight import Fact, HeadRecord, config_int
from specbuild.methods.weights import weights_findings
from specbuild.speculation import Speculation


class DraftTargetConfig(Section):
    """A draft model with the target's vocabulary."""

    method: Literal["draft_target"]
    checkpoint: Path
    """Hugging Face folder (or model id[@revision]) of the draft model (same tokenizer/vocabulary as the target)."""
    num_draft_tokens: PositiveInt32 = 4
    """Tokens the draft proposes per step (the BLS's num_draft_tokens)."""
    max_draft_len: PositiveInt32 | None = None
    """Target engine limit on draft tokens per step; defaults to num_draft_tokens and must be >= it."""
    use_draft_logits: bool = False
    """Accept by logit ratio (speculative sampling) instead of token comparison; builds both engines with
    --gather_generation_logits."""
    tp_size: PositiveInt32 = 1
    """Tensor parallelism of the draft engine (may differ from the target's)."""
    fast_logits: bool = False
    """Pass draft logits GPU-to-GPU (speculative_decoding_fast_logits): needs use_draft_logits and an orchestrator
    launch with pre-spawned ranks (--disable-spawn-processes, participant_ids)."""

    @model_validator(mode="after")
    def _default_max_draft_len(self):
        if self.max_draft_len is None:
            self.max_draft_len = self.num_draft_tokens
        return self


class DraftTargetDecodingConfig(WithDraftModel):
    """DraftTargetDecodingConfig (llm_args.py) as the CPU rehearsal reads it."""

    decoding_type: Literal["Draft_Target", "DraftTarget"]


class DraftTargetPack(MethodPack):
    name = "draft_target"
    Config = DraftTargetConfig
    Params = DraftModel
    summary = "a small draft model proposes, the target verifies"
    decoding_types = ("DraftTarget", "Draft_Target")  # from_dict's key, the union's tag
    two_model_drafter = True
    overlap_off = True  # TensorRT-LLM docs/source/features/speculative-decoding.md@04c8822, the DraftTarget example
    rehearsal_config = DraftTargetDecodingConfig
    decoder = "decoder:DraftTargetDecoder"
    trtllm = "trtllm:PART"
    trainer = "trainer:TRAINER"

    def describe(self, recipe) -> Speculation:
        spec: DraftTargetConfig = recipe.speculation
        assert spec.max_draft_len is not None  # DraftTargetConfig._default_max_draft_len
        draft = DraftModel(
            recipe.checkpoint_dir(spec.checkpoint),
            spec.num_draft_tokens,
            spec.use_draft_logits,
            spec.tp_size,
            spec.fast_logits,
        )
        return Speculation(
            method=self.name, mode=SpecMode.DRAFT_TOKENS_EXTERNAL, max_draft_len=spec.max_draft_len, params=draft
        )

    def checks(self, recipe) -> Iterator[Finding]:
        spec: DraftTargetConfig = recipe.speculation
        assert spec.max_draft_len is not None  # DraftTargetConfig._default_max_draft_len
        if spec.num_draft_tokens > spec.max_draft_len:
            yield Finding(
                ("speculation", "num_draft_tokens"),
                f"is {spec.num_draft_tokens} but max_draft_len is "
                f"{spec.max_draft_len}; the target engine rejects more drafts than it was built for "
                "(tensorrtllm_backend #473) — raise max_draft_len or lower num_draft_tokens",
            )
        if spec.fast_logits and not spec.use_draft_logits:
            yield Finding(
                ("speculation", "fast_logits"),
                "fast logits transfer draft logits, which are used only with "
                "use_draft_logits: true — set it, or remove fast_logits",
            )
        if not recipe.build.use_paged_context_fmha:
            yield Finding(
                ("build", "use_paged_context_fmha"),
                "draft-target needs KV-cache reuse, which needs paged "
                "context FMHA (each BLS round resends the prefix) — set use_paged_context_fmha: true",
            )

    def file_checks(self, recipe) -> Iterator[Finding]:
        spec: DraftTargetConfig = recipe.speculation
        draft_dir = recipe.checkpoint_dir(spec.checkpoint)
        draft, target = read_hf_config(draft_dir), read_hf_config(recipe.model_dir)
        if draft is None:
            yield Finding(
                ("speculation", "checkpoint"),
                f"no readable config.json in {spec.checkpoint} — point it at the draft model's Hugging Face folder",
            )
            return
        layout = list(weights_findings(draft_dir, spec.checkpoint, CAUSAL_LM))
        yield from layout
        if target is not None and not layout:  # a folder of another kind is named as such, not compared
            yield from preflight.findings(recipe, draft_record(draft_dir, draft))

    # --- translations ---------------------------------------------------------------------------------------------
    def bls_parameters(self, spec) -> dict[str, str]:
        draft = spec.params
        return {
            "speculative_method": self.name,
            "default_num_draft_tokens": str(draft.num_draft_tokens),
            "default_use_draft_logits": "true" if draft.use_draft_logits else "false",
        }

    def decoding(self, spec) -> dict[str, Any]:
        return {"num_draft_tokens": spec.params.num_draft_tokens, "use_draft_logits": spec.params.use_draft_logits}

    def speculative_config(self, spec, release, path) -> dict[str, Any]:
        return {
            "decoding_type": release.spelling(from_dict="DraftTarget", union="Draft_Target"),
            "max_draft_len": spec.max_draft_len,
            release.draft_field: path(spec.params.path),
        }

    def llmapi_checks(self, recipe, spec) -> Iterator[Finding]:
        """What the LLM API's Draft_Target cannot honour of a draft-target section."""
        draft = spec.params
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
                "the LLM API runs the draft with the target's parallelism; a separate draft tp_size does not exist "
                "there",
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

    def rehearse(self, config: DraftTargetDecodingConfig, k: int) -> Rehearsed:
        if config.draft_model is None:
            raise Unservable("speculative_model is required for DraftTarget — give the draft model's folder")
        return Rehearsed({"num_draft_tokens": k}, draft=config.draft_model)


PACK = DraftTargetPack()


def draft_record(folder: Path, cfg: dict) -> HeadRecord:
    """What pairs a draft model with its target: one vocabulary and tokenizer (the target verifies the draft's token
    ids), and positions for the whole sequence (the draft reads all of it). Its width, layers, rope and dtype are
    its own."""
    return HeadRecord(
        label="the draft model",
        facts=(preflight.VOCAB, preflight.TOKENIZER, preflight.POSITIONS),
        vocab=tuple(f for f in (config_int(cfg, "vocab_size"),) if f is not None),
        tokenizer=Fact(folder, "its tokenizer files"),
        max_positions=config_int(cfg, "max_position_embeddings"),
    )
