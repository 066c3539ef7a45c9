"""The NVIDIA GPUs of this machine and their compute capability.

TensorRT-LLM's engine path needs SM >= 8.0 for every speculative method (TensorRT-LLM
docs/source/legacy/advanced/speculative-decoding.md); FP8 needs SM >= 8.9 (Ada/Hopper; builder.py turns FP8 context FMHA
off below 89). GPUs are read from `nvidia-smi --query-gpu=name,compute_cap --format=csv,noheader` (one "name,
major.minor" line per GPU); without nvidia-smi on PATH, from torch.cuda when the TensorRT-LLM wheel (which brings torch)
is installed.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass

from specbuild.errors import UserError

MIN_COMPUTE_CAPABILITY = (8, 0)
FP8_COMPUTE_CAPABILITY = (8, 9)


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    compute_capability: tuple[int, int] | None  # None: the driver did not say

    @property
    def cc(self) -> str:
        return "?" if self.compute_capability is None else f"{self.compute_capability[0]}.{self.compute_capability[1]}"

    def __str__(self) -> str:
        return f"GPU {self.index}: {self.name} (compute capability {self.cc})"


@dataclass(frozen=True)
class GpuReport:
    gpus: list[Gpu]
    source: str  # "nvidia-smi", "torch" or "none"
    problem: str | None = None  # why no GPU could be listed, when that is known


def _parse_cc(text: str) -> tuple[int, int] | None:
    try:
        major, minor = text.strip().split(".")
        return int(major), int(minor)
    except ValueError:
        return None


def parse_nvidia_smi(text: str) -> list[Gpu]:
    """Parse `nvidia-smi --query-gpu=name,compute_cap --format=csv,noheader` output."""
    gpus = []
    for line in text.splitlines():
        if not line.strip():
            continue
        name, _, cc = line.rpartition(",")
        if not name:  # name only (a driver without compute_cap)
            name, cc = line, ""
        gpus.append(Gpu(len(gpus), name.strip(), _parse_cc(cc)))
    return gpus


def _run(argv: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=60)


def _from_nvidia_smi(exe: str) -> GpuReport:
    try:
        out = _run([exe, "--query-gpu=name,compute_cap", "--format=csv,noheader"])
        if out.returncode != 0 and "compute_cap" in (out.stdout + out.stderr):
            # Drivers older than R510 do not know the compute_cap field: list names only.
            out = _run([exe, "--query-gpu=name", "--format=csv,noheader"])
    except (OSError, subprocess.TimeoutExpired) as e:
        return GpuReport([], "nvidia-smi", f"{exe} could not run: {e}")
    if out.returncode != 0:
        msg = (out.stdout + out.stderr).strip().splitlines()
        return GpuReport([], "nvidia-smi", f"nvidia-smi exited {out.returncode}: {msg[-1] if msg else 'no output'}")
    return GpuReport(parse_nvidia_smi(out.stdout), "nvidia-smi")


def _from_torch() -> GpuReport:
    try:
        import torch
    except ImportError:
        return GpuReport([], "none", "nvidia-smi is not on PATH and torch is not installed")
    if not torch.cuda.is_available():
        return GpuReport([], "torch", "nvidia-smi is not on PATH and torch sees no CUDA device")
    gpus = [
        Gpu(i, torch.cuda.get_device_name(i), tuple(torch.cuda.get_device_capability(i)))
        for i in range(torch.cuda.device_count())
    ]
    return GpuReport(gpus, "torch")


def detect_gpus(*, torch_fallback: bool = True) -> GpuReport:
    exe = shutil.which("nvidia-smi")
    if exe:
        return _from_nvidia_smi(exe)
    if torch_fallback:
        return _from_torch()
    return GpuReport([], "none", "nvidia-smi is not on PATH")


def require_gpus(*, need_fp8: bool = False, torch_fallback: bool = True) -> list[Gpu]:
    """The GPUs, when there is at least one and every one is SM >= 8.0 (>= 8.9 with FP8); else a UserError."""
    report = detect_gpus(torch_fallback=torch_fallback)
    if not report.gpus:
        why = f" ({report.problem})" if report.problem else ""
        raise UserError(
            f"runtime: tensorrt-llm builds engines on an NVIDIA GPU, and none was found{why} — run on a "
            "machine with an NVIDIA GPU of compute capability 8.0 or newer and its driver (check with "
            "nvidia-smi), or set runtime: reference to build CPU reference engines"
        )
    old = [g for g in report.gpus if g.compute_capability is not None and g.compute_capability < MIN_COMPUTE_CAPABILITY]
    if old:
        listed = "; ".join(str(g) for g in old)
        raise UserError(
            f"{listed}: TensorRT-LLM's speculative decoding needs compute capability 8.0 or newer (Ampere "
            "and later) — use an A100/A10/L4/L40/H100/H200-class GPU, or runtime: reference "
            "(CUDA_VISIBLE_DEVICES can hide older GPUs)"
        )
    if need_fp8:
        slow = [
            g for g in report.gpus if g.compute_capability is not None and g.compute_capability < FP8_COMPUTE_CAPABILITY
        ]
        if slow:
            raise UserError(
                f"build.quantization: fp8 needs compute capability 8.9 or newer (Ada/Hopper) but "
                f"{'; '.join(str(g) for g in slow)} — set quantization: none or int8_weight_only, "
                "or use an L4/L40/H100/H200-class GPU"
            )
    return report.gpus
