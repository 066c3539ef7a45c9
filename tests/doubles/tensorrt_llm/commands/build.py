"""Double of `trtllm-build` (tensorrt_llm/commands/build.py:main, the console script).

The parser has the real flags, choices and defaults of the newest build.py / plugin.py; the
checks and rewrites follow tensorrt_llm/builder.py `build`. It writes an engine folder shaped like Engine.save
(builder.py): config.json {version, pretrained_config, build_config} and a placeholder rank{N}.engine per rank.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

import tensorrt_llm
from tensorrt_llm._double import fault, write_pid
from tensorrt_llm.models import MODEL_MAP
from tensorrt_llm.models.modeling_utils import SpeculativeDecodingMode

KV_CACHE_TYPES = ("CONTINUOUS", "PAGED", "DISABLED")  # bindings.KVCacheType; CLI spelling lower case (build.py)
EAGLE_MAX_BATCH_SIZE = 512  # builder.build asserts for EAGLE (builder.py)
EAGLE_MAX_DRAFT_LEN = 256  # builder.build asserts for EAGLE (builder.py)

# plugin.py cli_plugin_args with their choices and defaults, newest pydantic PluginConfig (plugin/plugin.py).
DTYPE_CHOICES = ["auto", "float16", "float32", "bfloat16", "int32", "disable"]
PLUGIN_DTYPE_ARGS = {
    "bert_attention_plugin": (DTYPE_CHOICES, "auto"),
    "gpt_attention_plugin": (DTYPE_CHOICES, "auto"),
    "gemm_plugin": (["auto", "float16", "float32", "bfloat16", "int32", "fp8", "nvfp4", "disable"], None),
    "gemm_swiglu_plugin": (["fp8", "disable"], "disable"),
    "fp8_rowwise_gemm_plugin": (DTYPE_CHOICES, "disable"),
    "lora_plugin": (DTYPE_CHOICES, "disable"),
    "moe_plugin": (DTYPE_CHOICES, "auto"),
    "mamba_conv1d_plugin": (DTYPE_CHOICES, "auto"),
    "nccl_plugin": (DTYPE_CHOICES, "auto"),
    "low_latency_gemm_plugin": (["fp8", "disable"], "disable"),
    "low_latency_gemm_swiglu_plugin": (["fp8", "disable"], "disable"),
    "gemm_allreduce_plugin": (["float16", "bfloat16", "disable"], "disable"),
}
PLUGIN_FEATURE_ARGS = {  # enable|disable flags and their defaults
    "dora_plugin": False,
    "context_fmha": True,
    "bert_context_fmha_fp32_acc": False,
    "remove_input_padding": True,
    "use_paged_context_fmha": True,
    "use_fp8_context_fmha": True,
    "fuse_fp4_quant": False,
    "multiple_profiles": False,
    "paged_state": True,
    "streamingllm": False,
    "norm_quant_fusion": False,
    "reduce_fusion": False,
    "user_buffer": False,
    "use_fused_mlp": True,
    "pp_reduce_scatter": False,
}


def kv_cache_type(value: str) -> str:
    # enum_type(KVCacheType): KVCacheType[value.upper()] (commands/build.py)
    if value.upper() not in KV_CACHE_TYPES:
        raise argparse.ArgumentTypeError(
            f"Invalid value '{value}'. Expected one of {[t.lower() for t in KV_CACHE_TYPES]}"
        )
    return value.upper()


def parse_arguments() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    add = p.add_argument
    add("--checkpoint_dir", type=str, default=None, help="The directory path that contains TensorRT LLM checkpoint.")
    add("--model_config", type=str, default=None, help="The file path that saves TensorRT LLM checkpoint config.")
    add("--build_config", type=str, default=None, help="The file path that saves TensorRT LLM build config.")
    add("--model_cls_file", type=str, default=None, help="The file path that defines customized model.")
    add("--model_cls_name", type=str, default=None, help="The customized TensorRT LLM model class name.")
    add("--output_dir", type=str, default="engine_outputs", help="The directory path to save the engine files.")
    add("--max_batch_size", type=int, default=2048, help="Maximum number of requests that the engine can schedule.")
    add("--max_input_len", type=int, default=1024, help="Maximum input length of one request.")
    add(
        "--max_seq_len",
        "--max_decoder_seq_len",
        dest="max_seq_len",
        type=int,
        default=None,
        help="Maximum total length of one request, including prompt and outputs.",
    )
    add("--max_beam_width", type=int, default=1, help="Maximum number of beams for beam search decoding.")
    add(
        "--max_num_tokens",
        type=int,
        default=8192,
        help="Maximum number of batched input tokens after padding is removed in each batch. Currently, the input "
        "padding is removed by default; you may explicitly disable it by specifying "
        "``--remove_input_padding disable``.",
    )
    add("--opt_num_tokens", type=int, default=None, help="Optimal number of batched input tokens.")
    add("--max_encoder_input_len", type=int, default=1024, help="Maximum encoder input length for enc-dec models.")
    add(
        "--max_prompt_embedding_table_size",
        "--max_multimodal_len",
        type=int,
        default=0,
        help="Maximum prompt embedding table size for prompt tuning.",
    )
    add(
        "--kv_cache_type",
        default=argparse.SUPPRESS,
        type=kv_cache_type,
        help="Set KV cache type (continuous, paged, or disabled).",
    )
    add(
        "--paged_kv_cache",
        type=str,
        default=argparse.SUPPRESS,
        help="Deprecated. Enabling this option is equvilient to ``--kv_cache_type paged`` for transformer based models.",
    )
    add("--input_timing_cache", type=str, default=None, help="The file path to read the timing cache.")
    add("--output_timing_cache", type=str, default="model.cache", help="The file path to write the timing cache.")
    add(
        "--profiling_verbosity",
        type=str,
        default="layer_names_only",
        choices=["layer_names_only", "detailed", "none"],
        help="The profiling verbosity for the generated TensorRT engine.",
    )
    add("--strip_plan", default=False, action="store_true", help="Enable stripping weights from the final engine.")
    add("--weight_sparsity", default=False, action="store_true", help="Enable weight sparsity.")
    add("--weight_streaming", default=False, action="store_true", help="Enable offloading weights to CPU.")
    add("--fast_build", default=False, action="store_true", help="Enable features for faster engine building.")
    add("--workers", type=int, default=1, help="The number of workers for building in parallel.")
    add(
        "--log_level",
        type=str,
        default="info",
        choices=["internal_error", "error", "warning", "info", "verbose", "debug", "trace"],
        help="The logging level.",
    )
    add("--enable_debug_output", default=False, action="store_true", help="Enable debug output.")
    add("--visualize_network", type=str, default=None, help="Export the TensorRT network as ONNX.")
    add("--dry_run", default=False, action="store_true", help="Run through the build process except the build.")
    add("--monitor_memory", default=False, action="store_true", help="Enable memory monitor during Engine build.")
    logits = p.add_argument_group("Logits arguments")
    logits.add_argument(
        "--logits_dtype", type=str, default=None, choices=["float16", "float32"], help="The data type of logits."
    )
    logits.add_argument(
        "--gather_context_logits", action="store_true", default=False, help="Enable gathering context logits."
    )
    logits.add_argument(
        "--gather_generation_logits", action="store_true", default=False, help="Enable gathering generation logits."
    )
    logits.add_argument(
        "--gather_all_token_logits",
        action="store_true",
        default=False,
        help="Enable both ``gather_context_logits`` and ``gather_generation_logits``.",
    )
    spec = p.add_argument_group("Speculative decoding arguments")
    spec.add_argument(
        "--speculative_decoding_mode",
        default=None,  # exactly these choices (build.py argparse)
        choices=["draft_tokens_external", "lookahead_decoding", "medusa", "explicit_draft_tokens", "eagle"],
        help="Mode of speculative decoding.",
    )
    spec.add_argument(
        "--max_draft_len",
        type=int,
        default=0,
        help="Maximum lengths of draft tokens for speculative decoding target model.",
    )
    plugins = p.add_argument_group("Plugin config arguments")
    for name, (choices, default) in PLUGIN_DTYPE_ARGS.items():
        plugins.add_argument("--" + name, type=str, default=default, choices=choices, help=f"The {name}.")
    plugins.add_argument(
        "--tokens_per_block",
        type=int,
        default=32,  # 32 newest, 64 older (plugin.py)
        help="Define how many tokens are contained in each paged kv cache block.",
    )
    for name, default in PLUGIN_FEATURE_ARGS.items():
        plugins.add_argument(
            "--" + name,
            type=str,
            default="enable" if default else "disable",
            choices=["enable", "disable"],
            help=f"The {name} feature.",
        )
    dropped = {f for f in os.environ.get("SPECBUILD_DOUBLE_DROP_FLAGS", "").split(",") if f}
    if dropped:  # an older or newer "release" without these flags: rebuild the parser without them
        for action in list(p._actions):
            if set(action.option_strings) & dropped:
                p._remove_action(action)
                for group in p._action_groups:
                    if action in group._group_actions:
                        group._group_actions.remove(action)
                for opt in action.option_strings:
                    p._option_string_actions.pop(opt, None)
    return p


def check_max_num_tokens(
    max_num_tokens, max_batch_size, max_input_len, max_seq_len, remove_input_padding, context_fmha, tokens_per_block
):
    """builder.py check_max_num_tokens, the branch for remove_input_padding enabled (the only one specbuild uses)."""
    if not remove_input_padding:
        return max_batch_size * max_seq_len
    if max_num_tokens > max_seq_len * max_batch_size:  # clipped to max_seq_len * max_batch_size
        max_num_tokens = max_seq_len * max_batch_size
    if max_num_tokens < max_input_len and not context_fmha:
        max_num_tokens = max_input_len
    elif max_num_tokens < tokens_per_block and context_fmha:
        max_num_tokens = tokens_per_block
    return max_num_tokens


def build_config_from(args, ckpt: dict) -> dict:
    """BuildConfig.from_dict(...) of main(), then the rewrites of builder.build (builder.py)."""
    enabled = {name: getattr(args, name) == "enable" for name in PLUGIN_FEATURE_ARGS if hasattr(args, name)}
    plugin = {
        name: (None if getattr(args, name) == "disable" else getattr(args, name))
        for name in PLUGIN_DTYPE_ARGS
        if hasattr(args, name)
    }
    plugin.update(enabled)
    plugin["tokens_per_block"] = getattr(args, "tokens_per_block", 32)
    plugin["dtype"] = ckpt["dtype"]
    mode = SpeculativeDecodingMode.from_arguments(args)
    b = {
        "max_input_len": args.max_input_len,
        "max_seq_len": args.max_seq_len,
        "opt_batch_size": 8,
        "max_batch_size": args.max_batch_size,
        "max_beam_width": args.max_beam_width,
        "max_num_tokens": args.max_num_tokens,
        "opt_num_tokens": args.opt_num_tokens,
        "max_prompt_embedding_table_size": args.max_prompt_embedding_table_size,
        "kv_cache_type": getattr(args, "kv_cache_type", None) or "PAGED",  # unset -> PAGED (build.py)
        "gather_context_logits": args.gather_context_logits,
        "gather_generation_logits": args.gather_generation_logits,
        "strongly_typed": True,
        "force_num_profiles": None,
        "profiling_verbosity": args.profiling_verbosity,
        "enable_debug_output": args.enable_debug_output,
        "max_draft_len": args.max_draft_len,
        "speculative_decoding_mode": mode,
        "use_refit": False,
        "input_timing_cache": args.input_timing_cache,
        "output_timing_cache": args.output_timing_cache,
        "lora_config": {},
        "weight_sparsity": args.weight_sparsity,
        "weight_streaming": args.weight_streaming,
        "plugin_config": plugin,
        "use_strip_plan": args.strip_plan,
        "max_encoder_input_len": args.max_encoder_input_len,
        "monitor_memory": args.monitor_memory,
        "use_mrope": False,
    }
    # _init_max_seq_len: unset -> max_position_embeddings x rope factor; max_input_len clipped (builder.py).
    if b["max_seq_len"] is None:
        factor = (ckpt.get("rotary_scaling") or {}).get("factor", 1.0)
        b["max_seq_len"] = int(math.ceil(ckpt["max_position_embeddings"] * factor))
    b["max_input_len"] = min(b["max_input_len"], b["max_seq_len"])
    b["max_num_tokens"] = check_max_num_tokens(
        b["max_num_tokens"],
        b["max_batch_size"],
        b["max_input_len"],
        b["max_seq_len"],
        plugin["remove_input_padding"],
        plugin["context_fmha"],
        plugin["tokens_per_block"],
    )
    # max_draft_len: the checkpoint's when the build config has 0 (builder.py).
    if "max_draft_len" in ckpt and b["max_draft_len"] == 0:
        b["max_draft_len"] = ckpt["max_draft_len"]
    if mode != SpeculativeDecodingMode.NONE:
        b["max_seq_len"] += b["max_draft_len"]  # (builder.py; docs/design.md)
    if mode == SpeculativeDecodingMode.EAGLE:
        assert "num_eagle_layers" in ckpt
        b["max_seq_len"] += ckpt["num_eagle_layers"]  # (builder.py)
    if mode != SpeculativeDecodingMode.NONE:
        b["max_num_tokens"] = max(b["max_num_tokens"], b["max_batch_size"] * (b["max_draft_len"] + 1))  # (builder.py)
    if mode == SpeculativeDecodingMode.EAGLE:
        # "No PP" (docs/source/legacy/advanced/speculative-decoding.md); the example converter asserts pp_size == 1.
        # Whether the wheel's builder asserts it too is not known: the double refuses it here so no PP EAGLE engine can
        # pass a test.
        assert ckpt["mapping"].get("pp_size", 1) == 1, "EAGLE does not support pipeline parallelism"
        assert b["max_batch_size"] <= EAGLE_MAX_BATCH_SIZE, "EAGLE requires max_batch_size <= 512"  # (builder.py)
        assert b["max_draft_len"] <= EAGLE_MAX_DRAFT_LEN, "EAGLE requires max_draft_len <= 256"  # (builder.py)
        if not plugin["use_paged_context_fmha"]:  # "Paged Context FMHA is required for EAGLE. Turning it on"
            # (builder.py)
            print("[TRT-LLM] [W] Paged Context FMHA is required for EAGLE. Turning it on")
            plugin["use_paged_context_fmha"] = True
        # EagleForCausalLM.forward asserts use_cache and a paged KV cache (source eagle/model.py).
        assert b["kv_cache_type"] == "PAGED", "EAGLE needs the paged KV cache"
    if not plugin["context_fmha"]:  # paged context FMHA needs context FMHA (plugin.py)
        plugin["use_paged_context_fmha"] = False
    return b


def main() -> None:
    args = parse_arguments().parse_args()
    write_pid()
    # Since ~0.19 the deprecation warning always prints (hasattr is always true; build.py).
    print(
        "[TRT-LLM] [W] Option --gather_generation_logits is deprecated, a build flag is not required anymore. "
        "Use --output_generation_logits at runtime instead.",
        flush=True,
    )
    if args.gather_all_token_logits:
        args.gather_context_logits = True
        args.gather_generation_logits = True
    if args.gather_context_logits and args.max_draft_len > 0:  # (builder.py)
        raise RuntimeError(
            "Gather context logits is not support with draft len > 0. If want to get the accepted "
            "tokens' logits from target model, please just enable gather_generation_logits"
        )
    os.makedirs(args.output_dir, exist_ok=True)
    ckpt_dir = Path(args.checkpoint_dir)
    ckpt = json.loads((ckpt_dir / "config.json").read_text())
    assert ckpt["architecture"] in MODEL_MAP, f"Unsupported model architecture: {ckpt['architecture']}"
    if fault("build") == "oom":
        raise RuntimeError(
            "[TensorRT-LLM][ERROR] CUDA runtime error in cudaMalloc: out of memory "
            "[specbuild test double: injected fault]"
        )
    if fault("build") == "ignore_max_draft_len":  # injected: a release that ignores --max_draft_len
        args.max_draft_len = 0
    build = build_config_from(args, ckpt)
    world = ckpt["mapping"]["world_size"]
    out = Path(args.output_dir)
    for rank in range(world):
        # parallel_build -> MODEL_MAP[arch].from_checkpoint(ckpt_dir, rank config): rank{N}.safetensors (build.py)
        weights = ckpt_dir / f"rank{rank}.safetensors"
        if not weights.is_file():
            raise FileNotFoundError(f"{weights} not found")
        with open(out / f"rank{rank}.engine", "wb") as f:
            f.write(b"specbuild test double: not a TensorRT engine\n")
        if rank == 0 and os.environ.get("SPECBUILD_DOUBLE_BUILD_SECONDS"):
            print("[TRT-LLM] [I] building...", flush=True)
            time.sleep(float(os.environ["SPECBUILD_DOUBLE_BUILD_SECONDS"]))
    # Engine.save: config.json = {version, pretrained_config, build_config minus dry_run/visualize_network} (builder.py)
    pretrained = {k: v for k, v in ckpt.items()}
    (out / "config.json").write_text(
        json.dumps(
            {"version": tensorrt_llm.__version__, "pretrained_config": pretrained, "build_config": build},
            indent=4,
            default=int,
        )
    )
    print("[TRT-LLM] [I] Total time of building all engines: 00:00:00", flush=True)


if __name__ == "__main__":
    main()
    sys.exit(0)
