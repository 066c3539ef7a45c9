"""MTP (multi-token prediction): the target's own next-n prediction layers draft (DeepSeek-V3 and a few others;
llmapi fact sheet §4.5). The LLM-API flavour on TensorRT-LLM only; the target checkpoint must carry the layers
(config.json num_nextn_predict_layers > 0)."""

from __future__ import annotations

from typing import Iterator, Literal

from specbuild.bounds import PositiveInt32
from specbuild.methods.base import Finding, Method, Section
from specbuild.checkpoint_tensors import has_mtp_layers, tensor_names
from specbuild.methods.common import checkpoint_root, read_hf_config
from specbuild.speculation import MtpLayers, Speculation


class MtpConfig(Section):
    """Draft with the target's MTP layers."""

    method: Literal["mtp"]
    num_nextn_predict_layers: PositiveInt32 = 1
    """MTP layers used per step (TensorRT-LLM sets max_draft_len to this); at most what the checkpoint has."""


class Mtp(Method):
    name = "mtp"
    Config = MtpConfig
    summary = "the target's own multi-token-prediction layers draft"

    def describe(self, recipe) -> Speculation:
        n = recipe.speculation.num_nextn_predict_layers
        return Speculation(method=self.name, mode=None, max_draft_len=n, mtp=MtpLayers(n))

    def file_checks(self, recipe) -> Iterator[Finding]:
        cfg = read_hf_config(recipe.model_dir) or {}
        have = cfg.get("num_nextn_predict_layers")
        want = recipe.speculation.num_nextn_predict_layers
        if not isinstance(have, int) or have < 1:
            yield Finding(("model", "checkpoint"), f"{recipe.model.checkpoint}/config.json has no MTP layers "
                          "(num_nextn_predict_layers) — MTP needs a checkpoint trained with them (e.g. DeepSeek-V3); "
                          "use eagle3, draft_target or prompt_lookup")
        elif want > have:
            yield Finding(("speculation", "num_nextn_predict_layers"), f"is {want} but the checkpoint has {have} MTP "
                          f"layer(s) — set it to at most {have}")
        else:
            layers = cfg.get("num_hidden_layers")
            names = tensor_names(recipe.model_dir, root=checkpoint_root(recipe.model_dir))
            if isinstance(layers, int) and names is not None and has_mtp_layers(names, layers) is False:
                yield Finding(("model", "checkpoint"), f"{recipe.model.checkpoint}/config.json names {have} MTP "
                              f"layer(s) but the weights hold none (no layer {layers} or later, nothing named mtp) — "
                              "exports and re-quantized copies often drop them; use a checkpoint that keeps them, or "
                              "eagle3, draft_target or prompt_lookup")
