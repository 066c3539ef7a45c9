"""Double of LLaMAForCausalLM / QWenForCausalLM (tensorrt_llm/models/llama/model.py, qwen/model.py)."""

from __future__ import annotations

from pathlib import Path

from tensorrt_llm._double import infer_dtype, log_call, maybe_crash, read_hf_config, write_pid
from tensorrt_llm.mapping import Mapping
from tensorrt_llm.models.modeling_utils import PretrainedModel, QuantConfig


def base_config(
    hf: dict, architecture: str, dtype: str, mapping: Mapping, quant_config: QuantConfig | None, kwargs: dict
) -> dict:
    """Checkpoint config.json common keys (docs/source/legacy/architecture/checkpoint.md); a missing HF key raises like
    the real readers."""
    heads = hf["num_attention_heads"]
    return {
        "architecture": architecture,
        "dtype": dtype,
        "logits_dtype": "float32",
        "vocab_size": hf["vocab_size"],
        "max_position_embeddings": hf["max_position_embeddings"],
        "hidden_size": hf["hidden_size"],
        "num_hidden_layers": hf["num_hidden_layers"],
        "num_attention_heads": heads,
        "num_key_value_heads": hf.get("num_key_value_heads", heads),
        "hidden_act": hf.get("hidden_act", "silu"),
        "intermediate_size": hf["intermediate_size"],
        "norm_epsilon": hf.get("rms_norm_eps", 1e-6),
        "position_embedding_type": "rope_gpt_neox",
        "rotary_base": hf.get("rope_theta", 10000.0),
        "rotary_scaling": hf.get("rope_scaling"),
        "mapping": mapping.to_dict(),
        "quantization": (quant_config or QuantConfig()).to_dict(),
        "use_parallel_embedding": kwargs.get("use_parallel_embedding", False),
        "embedding_sharding_dim": kwargs.get("embedding_sharding_dim", 0),
        "head_size": hf.get("head_dim") or hf["hidden_size"] // heads,
        "qk_layernorm": False,
    }


def base_weights(config: dict) -> dict:
    """One rank's weights of a Llama-family TensorRT-LLM checkpoint with their real names and shapes (the module
    tree of tensorrt_llm/models/llama/model.py: fused qkv, dense, fc/gate/proj, split across
    tp_size ranks; data sparse, write_safetensors)."""
    dt, h, v = config["dtype"], config["hidden_size"], config["vocab_size"]
    tp = config["mapping"].get("tp_size", 1)
    head = config["head_size"]
    q, kv = config["num_attention_heads"] * head, config["num_key_value_heads"] * head
    inter = config["intermediate_size"]
    out = {"transformer.vocab_embedding.weight": (dt, [v, h])}
    for i in range(config["num_hidden_layers"]):
        p = f"transformer.layers.{i}."
        out.update(
            {
                p + "input_layernorm.weight": (dt, [h]),
                p + "attention.qkv.weight": (dt, [(q + 2 * kv) // tp, h]),
                p + "attention.dense.weight": (dt, [h, q // tp]),
                p + "post_layernorm.weight": (dt, [h]),
                p + "mlp.fc.weight": (dt, [inter // tp, h]),
                p + "mlp.gate.weight": (dt, [inter // tp, h]),
                p + "mlp.proj.weight": (dt, [h, inter // tp]),
            }
        )
    out.update({"transformer.ln_f.weight": (dt, [h]), "lm_head.weight": (dt, [-(-v // tp), h])})
    return out


class LLaMAForCausalLM(PretrainedModel):
    @classmethod
    def from_hugging_face(cls, hf_model_or_dir, dtype="auto", mapping=None, quant_config=None, **kwargs):
        # Signature and known kwargs: tensorrt_llm/models/llama/model.py. Unknown kwargs become config attributes
        # (PretrainedConfig).
        write_pid()
        log_call(
            f"{cls.__name__}.from_hugging_face",
            {
                "hf_model_or_dir": hf_model_or_dir,
                "dtype": dtype,
                "mapping": mapping,
                "quant_config": quant_config,
                **kwargs,
            },
        )
        maybe_crash("convert")
        kwargs.pop(
            "trust_remote_code", True
        )  # every config reader defaults it to True (source: *Config.from_hugging_face)
        if quant_config is not None and quant_config._requires_modelopt_quantization:
            # Stricter than the wheel, which converts without calibration: FP8 & co. need <Class>.quantize()
            # (source: QuantConfig._requires_modelopt_quantization; examples call quantize for calibrated formats).
            raise NotImplementedError(
                f"{quant_config.quant_algo} needs calibration: use {cls.__name__}.quantize() [specbuild test double]"
            )
        mapping = mapping or Mapping()
        hf = read_hf_config(hf_model_or_dir)
        config = base_config(
            hf, hf["architectures"][0], infer_dtype(dtype, hf.get("torch_dtype")), mapping, quant_config, kwargs
        )
        return cls(config, mapping.rank, base_weights(config))

    @classmethod
    def quantize(
        cls,
        hf_model_dir,
        output_dir,
        dtype="auto",
        mapping=None,
        quant_config=None,
        *,
        device="cuda",
        calib_dataset="cnn_dailymail",
        calib_batches=512,
        calib_batch_size=1,
        calib_max_seq_length=512,
        random_seed=1234,
        tokenizer_max_seq_length=2048,
        **kwargs,
    ):
        # ModelOpt flow: calibrates, then writes config.json and every rank itself (source: LLaMAForCausalLM.quantize).
        write_pid()
        log_call(
            f"{cls.__name__}.quantize",
            {
                "hf_model_dir": hf_model_dir,
                "output_dir": output_dir,
                "dtype": dtype,
                "mapping": mapping,
                "quant_config": quant_config,
                "calib_dataset": calib_dataset,
                **kwargs,
            },
        )
        maybe_crash("convert")
        if quant_config is None or not quant_config._requires_modelopt_quantization:
            raise ValueError("quantize() without a calibrated quantization [specbuild test double]")
        mapping = mapping or Mapping()
        hf = read_hf_config(hf_model_dir)
        config = base_config(
            hf, hf["architectures"][0], infer_dtype(dtype, hf.get("torch_dtype")), mapping, quant_config, kwargs
        )
        for rank in range(mapping.world_size):
            cls(config, rank, base_weights(config)).save_checkpoint(Path(output_dir), save_config=(rank == 0))


class QWenForCausalLM(LLaMAForCausalLM):
    """Qwen2/Qwen3 share the Llama-family conversion in this double (MODEL_MAP -> QWenForCausalLM,
    tensorrt_llm/models/__init__.py)."""
