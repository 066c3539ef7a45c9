"""What this CPU is and computes natively (read once from /proc/cpuinfo)."""

from __future__ import annotations

import functools


@functools.lru_cache(maxsize=None)
def _cpuinfo(field: str) -> str:
    """The first `field : value` line's value in /proc/cpuinfo ('' where it has none or cannot be read)."""
    try:
        with open("/proc/cpuinfo") as f:
            line = next((line for line in f if line.partition(":")[0].strip() == field), "")
    except OSError:
        return ""
    return line.partition(":")[2].strip()


def flags() -> str:
    """The CPU's instruction-set flags as /proc/cpuinfo lists them ('' where it does not say)."""
    return _cpuinfo("flags")


def model_name() -> str:
    """The CPU's model name ('Intel(R) Xeon(R) Processor', 'AMD EPYC 7B13', ...; '' where /proc/cpuinfo does not
    say)."""
    return _cpuinfo("model name")


def has_native_bf16() -> bool:
    """Whether the CPU has bf16 matrix instructions (avx512_bf16 or amx_bf16). Without them torch emulates bf16
    matmuls: training steps run ~20x slower than in float32 (AVX2 EPYC) and bf16 inference gains nothing."""
    return bool({"avx512_bf16", "amx_bf16"} & set(flags().split()))


def vendor() -> str:
    """The CPU's vendor_id ('GenuineIntel', 'AuthenticAMD', ...; '' where /proc/cpuinfo does not say)."""
    return _cpuinfo("vendor_id")
