"""Double of EagleForCausalLM (tensorrt_llm/models/eagle/{model,config}.py), with the wheel's quirks."""

from __future__ import annotations

from tensorrt_llm._double import infer_dtype, log_call, maybe_crash, read_hf_config, write_pid
from tensorrt_llm.mapping import Mapping
from tensorrt_llm.models.llama import LLaMAForCausalLM, base_config, base_weights

WHEEL_LOADED_EAGLE_NETS = 4  # from_hugging_face (models/eagle/model.py): hard-coded `for idx in range(4)`


class EagleForCausalLM(LLaMAForCausalLM):
    @classmethod
    def from_hugging_face(cls, hf_model_or_dir, dtype="auto", mapping=None, quant_config=None, **kwargs):
        write_pid()
        log_call(
            "EagleForCausalLM.from_hugging_face",
            {
                "hf_model_or_dir": hf_model_or_dir,
                "dtype": dtype,
                "mapping": mapping,
                "quant_config": quant_config,
                **kwargs,
            },
        )
        maybe_crash("convert")
        kwargs.pop("trust_remote_code", True)  # defaults to True (source: EagleConfig.from_hugging_face)
        speculative_model_dir = kwargs.pop("speculative_model_dir", None)
        mapping = mapping or Mapping()
        hf = read_hf_config(hf_model_or_dir)
        dtype = infer_dtype(dtype, hf.get("torch_dtype"))
        head = hf["eagle"] if speculative_model_dir is None else read_hf_config(speculative_model_dir)
        # EagleConfig.from_hugging_face indexes these without defaults: KeyError when absent (source config.py).
        use_parallel_embedding = kwargs["use_parallel_embedding"]
        embedding_sharding_dim = kwargs["embedding_sharding_dim"]
        # speculative_config is read by attribute (source config.py): a dict raises AttributeError.
        spec = kwargs["speculative_config"]
        num_eagle_layers, max_non_leaves = spec.num_eagle_layers, spec.max_non_leaves_per_layer
        config = base_config(hf, "EagleForCausalLM", dtype, mapping, quant_config, kwargs)
        eagle_net = {
            "architecture": "LlamaForCausalLM",
            "dtype": dtype,
            "logits_dtype": "float32",
            "num_hidden_layers": head["num_hidden_layers"],
            "num_attention_heads": head["num_attention_heads"],
            "hidden_size": head["hidden_size"],
            "intermediate_size": head["intermediate_size"],
            "num_key_value_heads": head.get("num_key_value_heads", head["num_attention_heads"]),
            "vocab_size": config["vocab_size"],
            "position_embedding_type": "rope_gpt_neox",
            "max_position_embeddings": head["max_position_embeddings"],
            "hidden_act": config["hidden_act"],
            "norm_epsilon": head["rms_norm_eps"],
            "mapping": mapping.to_dict(),
            "use_parallel_embedding": use_parallel_embedding,
            "embedding_sharding_dim": embedding_sharding_dim,
        }
        # EagleConfig keys (tensorrt_llm/models/eagle/config.py); max_draft_len is never set from the arguments: 63.
        config.update(
            num_eagle_layers=num_eagle_layers,
            max_non_leaves_per_layer=max_non_leaves,
            max_draft_len=63,
            eagle_net_config=eagle_net,
        )
        weights = base_weights(config)
        nets = list(range(num_eagle_layers))  # the model has num_eagle_layers EagleNets (source model.py)
        for idx in range(WHEEL_LOADED_EAGLE_NETS):
            net = nets[idx]  # IndexError with fewer than 4 layers; layers past 4 get no weights, as in the wheel
            weights[f"eagle_nets.{net}.lm_head.weight"] = (dtype, [config["vocab_size"], config["hidden_size"]])
        return cls(config, mapping.rank, weights)
