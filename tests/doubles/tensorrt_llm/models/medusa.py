"""Double of MedusaForCausalLm (tensorrt_llm/models/medusa/{model,config}.py), with the wheel's quirks."""

from __future__ import annotations

import json

from tensorrt_llm._double import infer_dtype, log_call, maybe_crash, read_hf_config, write_pid
from tensorrt_llm.mapping import Mapping
from tensorrt_llm.models.llama import base_config, base_weights
from tensorrt_llm.models.modeling_utils import PretrainedModel


class MedusaForCausalLm(PretrainedModel):  # the lowercase "m" is the wheel's spelling (tensorrt_llm/models/__init__.py)
    @classmethod
    def from_hugging_face(cls, hf_model_or_dir, dtype="auto", mapping=None, quant_config=None, **kwargs):
        write_pid()
        log_call(
            "MedusaForCausalLm.from_hugging_face",
            {
                "hf_model_or_dir": hf_model_or_dir,
                "dtype": dtype,
                "mapping": mapping,
                "quant_config": quant_config,
                **kwargs,
            },
        )
        maybe_crash("convert")
        kwargs.pop("trust_remote_code", True)  # defaults to True (source: MedusaConfig.from_hugging_face)
        speculative_model_dir = kwargs.pop("speculative_model_dir", None)
        speculative_config = kwargs.pop("speculative_config", None)
        mapping = mapping or Mapping()
        hf = read_hf_config(hf_model_or_dir)
        dtype = infer_dtype(dtype, hf.get("torch_dtype"))
        if "medusa" in hf:  # ModelOpt combined checkpoint (examples/medusa/README.md)
            num_heads, num_layers = hf["medusa"]["num_medusa_heads"], hf["medusa"]["num_medusa_layers"]
        else:
            # `speculative_model_dir / "config.json"`: a str raises TypeError — it must be a pathlib.Path
            # (tensorrt_llm/models/medusa/config.py).
            heads_config = json.loads(open(speculative_model_dir / "config.json").read())
            # Heads: speculative_config.num_medusa_heads (attribute access) when given, else the key
            # "num_medusa_heads", which FasterDecoding heads configs do not have: they say medusa_num_heads
            # (tensorrt_llm/models/medusa/config.py).
            num_heads = (
                speculative_config.num_medusa_heads
                if speculative_config is not None
                else heads_config.get("num_medusa_heads")
            )
            num_layers = heads_config.get("medusa_num_layers")  # always from the heads' config (source)
        # MedusaConfig(max_draft_len=63): other kwargs flow into the config, so max_draft_len=N sets it (source
        # config.py); speculative_config's fields other than num_medusa_heads are ignored.
        max_draft_len = kwargs.pop("max_draft_len", 63)
        config = base_config(hf, "MedusaForCausalLM", dtype, mapping, quant_config, kwargs)
        config.update(num_medusa_heads=num_heads, num_medusa_layers=num_layers, max_draft_len=max_draft_len)
        weights = base_weights(config)
        # GenericMedusaForCausalLM builds range(num_medusa_heads) heads: None fails here, as in the wheel.
        # Medusa weights are converted with hard-coded dtype='float16' (tensorrt_llm/models/medusa/model.py).
        if "medusa" not in hf:
            weights.update(medusa_head_weights(speculative_model_dir, num_heads, num_layers, config, "float16"))
        return cls(config, mapping.rank, weights)


MEDUSA_FILES = ("medusa_lm_head.pt", "medusa_lm_head.safetensors")  # load_medusa_hf tries the .pt first


def medusa_head_weights(heads_dir, num_heads: int, num_layers: int, config: dict, dtype: str) -> dict:
    """The converted heads, read as tensorrt_llm/models/medusa/weight.py load_medusa_hf reads them:
    state_dict[f"{h}.{l}.linear.weight"], [...bias], [f"{h}.{num_medusa_layers}.weight"] for h in
    range(num_medusa_heads) — a head the file lacks is a KeyError (asking for more heads than the file holds)."""
    from tensorrt_llm._double import weight_names

    names = weight_names(heads_dir, MEDUSA_FILES)
    if names is None:
        raise FileNotFoundError(f"{heads_dir}/medusa_lm_head.pt")
    h, v, tp = config["hidden_size"], config["vocab_size"], config["mapping"].get("tp_size", 1)
    out = {}
    for i in range(num_heads):
        for j in range(num_layers):
            for key in (f"{i}.{j}.linear.weight", f"{i}.{j}.linear.bias"):
                if key not in names:
                    raise KeyError(key)
            out[f"medusa_heads.{i}.medusa_layers.{j}.linear.weight"] = (dtype, [h // tp, h])
            out[f"medusa_heads.{i}.medusa_layers.{j}.linear.bias"] = (dtype, [h // tp])
        if f"{i}.{num_layers}.weight" not in names:
            raise KeyError(f"{i}.{num_layers}.weight")
        out[f"medusa_heads.{i}.lm_head.weight"] = (dtype, [-(-v // tp), h])
    return out
