"""Double of tensorrt_llm.models.modeling_utils: QuantConfig, SpeculativeDecodingMode, PretrainedModel."""

from __future__ import annotations

import enum
import json
from pathlib import Path

from tensorrt_llm._double import write_safetensors
from tensorrt_llm.quantization import QuantAlgo


class SpeculativeDecodingMode(enum.IntFlag):
    # Member order of the newest modeling_utils.py; auto() gives 1, 2, 4, ... (docs/design.md).
    NONE = 1
    DRAFT_TOKENS_EXTERNAL = 2
    MEDUSA = 4
    LOOKAHEAD_DECODING = 8
    EXPLICIT_DRAFT_TOKENS = 16
    EAGLE = 32
    NGRAM = 64
    USER_PROVIDED = 128
    SAVE_HIDDEN_STATES = 256
    AUTO = 512

    @staticmethod
    def from_arguments(args) -> "SpeculativeDecodingMode":
        # trtllm-build: None -> NONE, else the upper-cased CLI choice (tensorrt_llm/commands/build.py).
        if args.speculative_decoding_mode is None:
            return SpeculativeDecodingMode.NONE
        return SpeculativeDecodingMode[args.speculative_decoding_mode.upper()]


class QuantConfig:
    def __init__(self, quant_algo: QuantAlgo | None = None, kv_cache_quant_algo: QuantAlgo | None = None):
        self.quant_algo = quant_algo
        self.kv_cache_quant_algo = kv_cache_quant_algo

    @property
    def _requires_modelopt_quantization(self) -> bool:
        # modeling_utils.py QuantConfig: FP8, NVFP4, AWQ, SQ per-channel and mixed precision go through ModelOpt
        # calibration in <Class>.quantize() (source; examples/models/core/llama/convert_checkpoint.py lists --use_fp8
        # among its flags).
        return self.quant_algo in (
            QuantAlgo.NVFP4,
            QuantAlgo.FP8,
            QuantAlgo.W4A16_AWQ,
            QuantAlgo.W4A8_AWQ,
            QuantAlgo.W8A8_SQ_PER_CHANNEL,
            QuantAlgo.MIXED_PRECISION,
        ) or (self.quant_algo is None and self.kv_cache_quant_algo == QuantAlgo.FP8)

    def to_dict(self) -> dict:
        # config.json quantization{quant_algo,kv_cache_quant_algo} (docs/source/legacy/architecture/checkpoint.md)
        return {
            "quant_algo": self.quant_algo.value if self.quant_algo else None,
            "kv_cache_quant_algo": self.kv_cache_quant_algo.value if self.kv_cache_quant_algo else None,
        }


class PretrainedModel:
    """A converted model: a checkpoint config (dict) and the weights one rank holds (names -> (dtype, shape))."""

    def __init__(self, config: dict, rank: int, weights: dict[str, tuple[str, list[int]]]):
        self.config = config
        self.rank = rank
        self.weights = weights

    def save_checkpoint(self, output_dir, save_config: bool = True) -> None:
        # TensorRT-LLM checkpoint: config.json + rank{N}.safetensors, one per TP x PP rank
        # (docs/source/legacy/architecture/checkpoint.md).
        out = Path(output_dir)
        out.mkdir(parents=True, exist_ok=True)
        write_safetensors(out / f"rank{self.rank}.safetensors", self.weights)
        if save_config:
            (out / "config.json").write_text(json.dumps(self.config, indent=4))
