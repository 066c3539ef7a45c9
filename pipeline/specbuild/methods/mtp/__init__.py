"""MTP (multi-token prediction): the target's own next-n prediction layers draft (DeepSeek-V3 and a few others;
TensorRT-LLM tensorrt_llm/llmapi/llm_args.py MTPDecodingConfig). The LLM-API flavour on TensorRT-LLM only; the target
checkpoint must carry the layers (config.json num_nextn_predict_layers > 0, and the layers in its weights).

How deep it may draft depends on the checkpoint, by the rule of TensorRT-LLM's `MTPDecodingConfig.spec_dec_mode`
(`tensorrt_llm/llmapi/llm_args.py`; `update_spec_config_from_model_config` in `tensorrt_llm/_torch/speculative/
utils.py` fills in the checkpoint's count): a checkpoint with exactly one MTP layer (DeepSeek-V3/R1) runs
MTP-Eagle, which reuses that layer for every draft token, so any num_nextn_predict_layers is served (TensorRT-LLM's
curated deepseek-r1-latency.yaml uses 3); a checkpoint with more layers runs vanilla MTP, one layer per draft
token, so at most that many.
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator, Literal

from specbuild.facts.bounds import PositiveInt32
from specbuild.findings import Finding
from specbuild.methods.mtp.params import MtpLayers
from specbuild.methods.pack import MethodPack, Refusal
from specbuild.section import Section
from specbuild.checkpoints.checkpoint_tensors import LAYER_INDEX, tensor_names
from specbuild.checkpoints.checkpoint_files import checkpoint_root, read_hf_config
from specbuild.speculation import Speculation


def has_mtp_layers(names: Iterable[str], num_layers: int) -> bool | None:
    """Whether the names hold multi-token-prediction layers: decoder layers numbered from `num_layers` on
    (DeepSeek-V3's `model.layers.61.*`, GLM-4.5's), or tensors named `mtp` / `nextn` (Qwen3-Next's `mtp.*`).
    None when the names show no layer numbers (nothing to tell by)."""
    names = list(names)
    if any("mtp" in n or "nextn" in n for n in names):
        return True
    found = {int(m.group(1)) for n in names if (m := LAYER_INDEX.search(n))}
    if not found:
        return None
    return max(found) >= num_layers


# Releases whose MTPDecodingConfig picks MTP-Eagle (one layer reused) for a one-layer checkpoint and vanilla MTP
# otherwise, read in llm_args.py: 1.0 (`spec_dec_mode`: num_nextn_predict_layers_from_model_config == 1 and not
# use_mtp_vanilla -> MTP_EAGLE), 1.1 (the same, plus mtp_eagle_one_model, default true), and the post-1.3.0rc3
# main source (the same rule); 1.2 lies between them. A release missing here has no known rule: check refuses
# depths beyond the checkpoint's layers there.
REUSES_SINGLE_MTP_LAYER = frozenset({"1.0", "1.1", "1.2", "1.3"})


def max_depth(checkpoint_layers: int, release: str | None) -> int | None:
    """The deepest num_nextn_predict_layers TensorRT-LLM `release` serves on a checkpoint with this many MTP
    layers (None: no limit, the one layer is reused)."""
    if checkpoint_layers == 1 and release in REUSES_SINGLE_MTP_LAYER:
        return None
    return checkpoint_layers


class MtpConfig(Section):
    """Draft with the target's MTP layers."""

    method: Literal["mtp"]
    num_nextn_predict_layers: PositiveInt32 = 1
    """Draft tokens per step (TensorRT-LLM sets max_draft_len to this). A checkpoint with one MTP layer
    (DeepSeek-V3/R1) reuses it for every draft token (MTP-Eagle), so any depth; with more layers, at most that
    many."""


class MtpPack(MethodPack):
    name = "mtp"
    Config = MtpConfig
    Params = MtpLayers
    summary = "the target's own multi-token-prediction layers draft"
    decoding_types = ("MTP",)
    reference_refusal = Refusal(
        "MTP drafts with the target's own multi-token-prediction layers (DeepSeek-V3 and similar models), which "
        "the reference runtime does not implement",
        "runtime: tensorrt-llm, or eagle3, draft_target or prompt_lookup",
    )

    def describe(self, recipe) -> Speculation:
        n = recipe.speculation.num_nextn_predict_layers
        return Speculation(method=self.name, mode=None, max_draft_len=n, params=MtpLayers(n))

    def file_checks(self, recipe) -> Iterator[Finding]:
        cfg = read_hf_config(recipe.model_dir) or {}
        have = cfg.get("num_nextn_predict_layers")
        want = recipe.speculation.num_nextn_predict_layers
        if not isinstance(have, int) or isinstance(have, bool) or have < 1:
            yield Finding(
                ("model", "checkpoint"),
                f"{recipe.model.checkpoint}/config.json has no MTP layers "
                "(num_nextn_predict_layers) — MTP needs a checkpoint trained with them (e.g. DeepSeek-V3); "
                "use eagle3, draft_target or prompt_lookup",
            )
            return
        release = recipe.llm_api.release
        limit = max_depth(have, release)
        if limit is not None and want > limit:
            why = (
                "vanilla MTP drafts one token per layer" if have > 1 else f"no rule is known for TensorRT-LLM {release}"
            )
            yield Finding(
                ("speculation", "num_nextn_predict_layers"),
                f"is {want} but the checkpoint has {have} MTP layer(s) and {why} — set it to at most {limit}",
            )
            return
        layers = cfg.get("num_hidden_layers")
        names = tensor_names(recipe.model_dir, root=checkpoint_root(recipe.model_dir))
        if isinstance(layers, int) and names is not None and has_mtp_layers(names, layers) is False:
            yield Finding(
                ("model", "checkpoint"),
                f"{recipe.model.checkpoint}/config.json names {have} MTP "
                f"layer(s) but the weights hold none (no layer {layers} or later, nothing named mtp) — "
                "exports and re-quantized copies often drop them; use a checkpoint that keeps them, or "
                "eagle3, draft_target or prompt_lookup",
            )

    # --- translations ---------------------------------------------------------------------------------------------
    def speculative_config(self, spec, release, path) -> dict[str, Any]:
        return {"decoding_type": "MTP", "num_nextn_predict_layers": spec.params.num_nextn_predict_layers}


PACK = MtpPack()
