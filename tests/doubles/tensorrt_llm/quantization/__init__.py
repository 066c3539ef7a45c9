"""Double of tensorrt_llm.quantization.QuantAlgo (a str enum keyed by member name, like the real one)."""

import enum


class QuantAlgo(str, enum.Enum):
    W8A16 = "W8A16"
    W4A16 = "W4A16"
    W4A16_AWQ = "W4A16_AWQ"
    W4A8_AWQ = "W4A8_AWQ"
    W8A16_GPTQ = "W8A16_GPTQ"
    W4A16_GPTQ = "W4A16_GPTQ"
    W8A8_SQ_PER_CHANNEL = "W8A8_SQ_PER_CHANNEL"
    FP8 = "FP8"
    FP8_PER_CHANNEL_PER_TOKEN = "FP8_PER_CHANNEL_PER_TOKEN"
    NVFP4 = "NVFP4"
    INT8 = "INT8"
    MIXED_PRECISION = "MIXED_PRECISION"
