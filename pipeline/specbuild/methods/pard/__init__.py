"""PARD (parallel draft, arXiv 2504.18583): a small draft model trained with mask tokens predicts all K drafts in one
forward over the accepted text and K - 1 mask tokens (TensorRT-LLM's `PARD` decoding type: PARDDecodingConfig of
tensorrt_llm/llmapi/llm_args.py@0004396, tensorrt_llm/_torch/speculative/pard.py@80aa8ca `PARDWorker`). Target-
independent: the draft reads no hidden states, only the target's vocabulary (plus its mask token).

The LLM-API flavour only, from release 1.3 (PARDDecodingConfig is read in llm_args.py of main after 1.3.0rc3; whether
1.2.x has it was not read). The pack: this section, params.py, checkpoint.py (what a PARD draft must be, stdlib
only), model.yaml's speculative_config and the CPU rehearsal's reading here, decoder.py (reference). The zoo trains
one (`python -m specbuild.zoo add-stage pard`, pipeline/specbuild/zoo/distill_pard.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator, Literal

from specbuild.checkpoints.checkpoint_files import read_hf_config
from specbuild.facts.bounds import NonNegativeInt32, PositiveInt32
from specbuild.findings import Finding
from specbuild.methods.llm_args import WithDraftModel
from specbuild.methods.pack import MethodPack, Refusal, Rehearsed, Unservable
from specbuild.methods.pard.checkpoint import mask_token_id, pard_problems
from specbuild.methods.pard.params import PardDraft
from specbuild.section import Section
from specbuild.speculation import Speculation

RELEASES = ("1.3",)  # PARDDecodingConfig: llm_args.py of main after 1.3.0rc3 and @0004396; 1.2.x not read


class PardConfig(Section):
    """A parallel draft model (PARD): the target's vocabulary plus a mask token."""

    method: Literal["pard"]
    checkpoint: Path
    """Hugging Face folder (or model id[@revision]) of the PARD draft: a causal LM whose config.json names its mask
    token (pard_token), e.g. the zoo's checkpoints/<profile>/pard."""
    max_draft_len: PositiveInt32 = 4
    """Drafts per step, all from one draft forward (the draft's K - 1 mask tokens); the draft must have been trained
    that deep."""
    mask_token_id: NonNegativeInt32 | None = None
    """The mask token's id; default the draft config's (pard_token, else mask_token_id, else vocab_size)."""


class PARDDecodingConfig(WithDraftModel):
    """PARDDecodingConfig (llm_args.py@0004396) as the CPU rehearsal validates it."""

    decoding_type: Literal["PARD"]
    mask_token_id: NonNegativeInt32 | None = None


class PardPack(MethodPack):
    name = "pard"
    Config = PardConfig
    Params = PardDraft
    summary = "a parallel draft model proposes all K drafts in one forward from mask tokens"
    decoding_types = ("PARD",)
    rehearsal_config = PARDDecodingConfig
    decoder = "decoder:PardDecoder"
    untrained = (
        "adapt has no PARD trainer: its parallel draft is trained by the zoo's pard stage (python -m specbuild.zoo "
        "add-stage pard), not on served traffic"
    )

    def describe(self, recipe) -> Speculation:
        s: PardConfig = recipe.speculation
        draft = PardDraft(recipe.checkpoint_dir(s.checkpoint), s.max_draft_len, s.mask_token_id)
        return Speculation(method=self.name, mode=None, max_draft_len=s.max_draft_len, params=draft)

    def file_checks(self, recipe) -> Iterator[Finding]:
        s: PardConfig = recipe.speculation
        draft, target = read_hf_config(recipe.checkpoint_dir(s.checkpoint)), read_hf_config(recipe.model_dir)
        if draft is None:
            yield Finding(
                ("speculation", "checkpoint"),
                f"no readable config.json in {s.checkpoint} — point it at the PARD draft's Hugging Face folder",
            )
            return
        if target is None:
            return
        for problem in pard_problems(draft, target, mask_override=s.mask_token_id):
            yield Finding(
                ("speculation", "mask_token_id" if s.mask_token_id is not None else "checkpoint"),
                f"{s.checkpoint}: {problem}",
            )

    # --- translations ---------------------------------------------------------------------------------------------
    def speculative_config(self, spec, release, path) -> dict[str, Any] | Refusal:
        if release.line not in RELEASES:
            return Refusal(
                f"PARDDecodingConfig is read only in llm_args.py of main after 1.3.0rc3, not at release {release.line}",
                "llm_api.release: 1.3, or draft_target with an autoregressive draft",
            )
        draft: PardDraft = spec.params
        out: dict[str, Any] = {
            "decoding_type": "PARD",
            "max_draft_len": spec.max_draft_len,
            release.draft_field: path(draft.path),
        }
        if draft.mask_token_id is not None:
            out["mask_token_id"] = draft.mask_token_id
        return out

    def rehearse(self, config: PARDDecodingConfig, k: int) -> Rehearsed:
        if config.draft_model is None:
            raise Unservable("speculative_model is required for PARD — give the PARD draft's folder")
        decoding: dict[str, Any] = {"max_draft_len": k}
        mask = config.mask_token_id
        if mask is None:  # the draft config's, as PARDForCausalLM reads it
            found, _ = mask_token_id(read_hf_config(Path(config.draft_model)) or {})
            mask = found
        if mask is not None:
            decoding["mask_token_id"] = mask
        return Rehearsed(decoding, draft=config.draft_model)


PACK = PardPack()
