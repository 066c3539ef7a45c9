"""Double of examples/medusa/convert_checkpoint.py: its flags; writes its config.json."""

import argparse
from pathlib import Path

from tensorrt_llm._double import infer_dtype, maybe_crash, read_hf_config, write_pid
from tensorrt_llm.mapping import Mapping
from tensorrt_llm.models.llama import base_config, base_weights
from tensorrt_llm.models.medusa import MedusaForCausalLm, medusa_head_weights
from tensorrt_llm.models.modeling_utils import QuantConfig
from tensorrt_llm.quantization import QuantAlgo


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model_dir", type=str, default=None)
    p.add_argument("--medusa_model_dir", type=str, default=None)
    p.add_argument("--meta_ckpt_dir", type=str, default=None)
    p.add_argument("--tp_size", type=int, default=1)
    p.add_argument("--pp_size", type=int, default=1)
    p.add_argument("--output_dir", type=str, default="tllm_checkpoint")
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--dtype", type=str, default="float16", choices=["float32", "bfloat16", "float16"])
    p.add_argument("--num_medusa_heads", type=int, default=4)
    p.add_argument("--num_medusa_layers", type=int, default=1)
    p.add_argument("--max_medusa_token_len", type=int, default=63)
    p.add_argument("--medusa_hidden_act", type=str, default="silu")
    p.add_argument("--model_type", type=str, default="llama", choices=["llama", "mixtral", "qwen2"])
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
    write_pid()
    maybe_crash("convert")
    hf = read_hf_config(args.model_dir)
    heads_cfg = read_hf_config(args.medusa_model_dir)
    quant = (
        QuantConfig({"int8": QuantAlgo.W8A16, "int4": QuantAlgo.W4A16}[args.weight_only_precision])
        if args.use_weight_only
        else QuantConfig()
    )
    world = args.tp_size * args.pp_size
    for rank in range(world):
        mapping = Mapping(world_size=world, rank=rank, tp_size=args.tp_size, pp_size=args.pp_size)
        config = base_config(hf, "MedusaForCausalLM", infer_dtype(args.dtype, None), mapping, quant, {})
        # The heads count written is the CLI --num_medusa_heads, not the heads config's (as the real script does).
        config.update(
            num_medusa_heads=args.num_medusa_heads,
            num_medusa_layers=args.num_medusa_layers,
            max_draft_len=args.max_medusa_token_len,
            model_type=args.model_type,
        )
        weights = base_weights(config)
        weights.update(
            medusa_head_weights(
                args.medusa_model_dir, args.num_medusa_heads, args.num_medusa_layers, config, config["dtype"]
            )
        )
        MedusaForCausalLm(config, rank, weights).save_checkpoint(Path(args.output_dir), save_config=(rank == 0))
    del heads_cfg


if __name__ == "__main__":
    main()
