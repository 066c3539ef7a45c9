"""Double of examples/eagle/convert_checkpoint.py: its flags and asserts.

Unlike the wheel's from_hugging_face, the script honours every EAGLE argument (examples/eagle/README.md).
"""

import argparse
from pathlib import Path

from tensorrt_llm._double import infer_dtype, maybe_crash, read_hf_config, write_pid
from tensorrt_llm.mapping import Mapping
from tensorrt_llm.models.eagle import EagleForCausalLM
from tensorrt_llm.models.llama import base_config, base_weights
from tensorrt_llm.models.modeling_utils import QuantConfig
from tensorrt_llm.quantization import QuantAlgo


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model_dir", type=str, default=None)
    p.add_argument("--eagle_model_dir", type=str, default=None)
    p.add_argument("--tp_size", type=int, default=1)
    p.add_argument("--pp_size", type=int, default=1)
    p.add_argument("--output_dir", type=str, default="tllm_checkpoint")
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--dtype", type=str, default="auto", choices=["auto", "float16", "bfloat16", "float32"])
    p.add_argument("--max_draft_len", type=int, default=63)
    p.add_argument("--num_eagle_layers", type=int, default=4)
    p.add_argument("--max_non_leaves_per_layer", type=int, default=10)
    p.add_argument("--use_weight_only", action="store_true", default=False)
    p.add_argument(
        "--weight_only_precision",
        const="int8",
        type=str,
        nargs="?",
        default="int8",
        choices=["int8", "int4", "int4_gptq"],
    )
    args = p.parse_args()
    assert args.pp_size == 1, "Pipeline parallelism is not supported."  # `assert args.pp_size == 1`
    assert args.max_draft_len <= 256, "max_draft_len > 256 is not supported"  # asserted <= 256
    write_pid()
    maybe_crash("convert")
    hf = read_hf_config(args.model_dir)
    head = read_hf_config(args.eagle_model_dir)
    quant = (
        QuantConfig({"int8": QuantAlgo.W8A16, "int4": QuantAlgo.W4A16}[args.weight_only_precision])
        if args.use_weight_only
        else QuantConfig()
    )
    world = args.tp_size * args.pp_size
    for rank in range(world):
        mapping = Mapping(world_size=world, rank=rank, tp_size=args.tp_size, pp_size=args.pp_size)
        config = base_config(hf, "EagleForCausalLM", infer_dtype(args.dtype, hf.get("torch_dtype")), mapping, quant, {})
        config.update(
            num_eagle_layers=args.num_eagle_layers,
            max_non_leaves_per_layer=args.max_non_leaves_per_layer,
            max_draft_len=args.max_draft_len,
            eagle_net_config={
                "architecture": "LlamaForCausalLM",
                "dtype": config["dtype"],
                "num_hidden_layers": head["num_hidden_layers"],
                "num_attention_heads": head["num_attention_heads"],
                "hidden_size": head["hidden_size"],
                "vocab_size": config["vocab_size"],
                "mapping": mapping.to_dict(),
            },
        )
        weights = base_weights(config)
        for i in range(args.num_eagle_layers):
            weights[f"eagle_nets.{i}.lm_head.weight"] = (config["dtype"], [config["vocab_size"], config["hidden_size"]])
        EagleForCausalLM(config, rank, weights).save_checkpoint(Path(args.output_dir), save_config=(rank == 0))


if __name__ == "__main__":
    main()
