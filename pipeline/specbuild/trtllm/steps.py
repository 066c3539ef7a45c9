"""The tensorrt-llm runtime's plan steps: convert a checkpoint, run trtllm-build (verify-engine is generic).

Each step holds typed fields; `details()`/`command()` render them for `specbuild plan`, and the executors in
convert.py and build.py read the fields (`worker_spec`, `script_argv`, `build_argv`), never the rendered text.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from specbuild.files.paths import show
from specbuild.plan import ROLES_DOC, Step
from specbuild.trtllm.converters import Converter

QUANT_WHEEL = {"int8_weight_only": "W8A16", "int4_weight_only": "W4A16", "fp8": "FP8"}
# QuantConfig._requires_modelopt_quantization: FP8 is calibrated by ModelOpt in <Class>.quantize(), which writes
# every rank itself; from_hugging_face only handles the uncalibrated weight-only algorithms.
QUANT_CALIBRATED = {"fp8"}
CALIBRATION = {"calib_dataset": "cnn_dailymail", "calib_batches": 512}  # the wheel's defaults, made explicit
QUANT_SCRIPT = {
    "int8_weight_only": ["--use_weight_only", "--weight_only_precision", "int8"],
    "int4_weight_only": ["--use_weight_only", "--weight_only_precision", "int4"],
    "fp8": ["--use_fp8"],
}


def _shown(value: Any) -> Any:
    if isinstance(value, Path):
        return show(value)
    if isinstance(value, dict):
        return {k: _shown(v) for k, v in value.items()}
    return value


def _absolute(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value.expanduser().absolute())
    if isinstance(value, dict):
        return {k: _absolute(v) for k, v in value.items()}
    return value


@dataclass(frozen=True, kw_only=True)
class ConvertStep(Step):
    kind: ClassVar[str] = "convert"
    converter: Converter
    model_dir: Path
    output: Path
    dtype: str
    tp_size: int
    pp_size: int
    workers: int
    quantization: str
    trust_remote_code: bool
    examples: Path | None = None  # the TensorRT-LLM examples/ tree of a script conversion
    expect: dict[str, Any]  # config.json keys the converted checkpoint must carry

    @property
    def world_size(self) -> int:
        return self.tp_size * self.pp_size

    @property
    def function(self) -> str:
        return "quantize" if self.quantization in QUANT_CALIBRATED else "from_hugging_face"

    def title(self) -> str:
        if self.converter.via == "script":
            return f"convert {self.role} checkpoint with {self.converter.script}"
        return f"convert {self.role} checkpoint with {self.converter.model_class}.{self.function}"

    # --- the example-script path ----------------------------------------------------------------------------
    def script_argv(self, python: str, output_dir: Path, shown: bool = False) -> list[str]:
        c = self.converter
        path = (lambda p: show(p)) if shown else (lambda p: str(p))
        return [
            python,
            str(self.examples / c.script),
            "--model_dir",
            path(self.model_dir),
            "--output_dir",
            path(output_dir),
            "--dtype",
            self.dtype,
            "--tp_size",
            str(self.tp_size),
            "--pp_size",
            str(self.pp_size),
            "--workers",
            str(self.workers),
            *(path(a) if isinstance(a, Path) else a for a in c.script_args),
            *(QUANT_SCRIPT[self.quantization] if self.quantization != "none" else []),
        ]

    def command(self) -> list[str] | None:
        if self.converter.via != "script":
            return None
        return self.script_argv("python3", self.output, shown=True)

    # --- the wheel path -------------------------------------------------------------------------------------
    def _call_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"trust_remote_code": self.trust_remote_code}  # the wheel defaults it to True
        if self.quantization != "none":
            kwargs["quant_config"] = {"quant_algo": QUANT_WHEEL[self.quantization]}
        kwargs.update(self.converter.kwargs)
        if self.function == "quantize":
            kwargs.update(CALIBRATION)
        return kwargs

    def worker_spec(self, output_dir: Path) -> dict[str, Any]:
        """What specbuild.trtllm.convert_worker reads (absolute paths)."""
        kwargs = self._call_kwargs()
        quant = kwargs.pop("quant_config", None)
        return {
            "model_class": self.converter.model_class,
            "function": self.function,
            "hf_model_dir": _absolute(self.model_dir),
            "dtype": self.dtype,
            "tp_size": self.tp_size,
            "pp_size": self.pp_size,
            "quant_algo": quant["quant_algo"] if quant else None,
            "kwargs": _absolute(kwargs),
            "output_dir": str(output_dir),
        }

    def details(self) -> dict[str, Any]:
        out: dict[str, Any] = {"via": self.converter.via, "why": self.converter.reason}
        if self.converter.via == "script":
            return out
        kwargs = self._call_kwargs()
        arguments = {
            "hf_model_or_dir": show(self.model_dir),
            "dtype": self.dtype,
            "mapping": {"world_size": self.world_size, "tp_size": self.tp_size, "pp_size": self.pp_size},
            "trust_remote_code": kwargs.pop("trust_remote_code"),
        }
        arguments.update(_shown(kwargs))
        if self.function == "quantize":
            ranks = (
                f"all {self.world_size} rank(s) in one call: ModelOpt calibrates on calib_dataset (downloaded "
                "from the Hugging Face hub) and writes config.json and every rank{N}.safetensors"
            )
        else:
            ranks = (
                f"0..{self.world_size - 1}: from_hugging_face(mapping rank r) then save_checkpoint(output, "
                "save_config=(r == 0))"
            )
        out.update(
            {
                "call": f"tensorrt_llm.models.{self.converter.model_class}.{self.function}",
                "arguments": arguments,
                "ranks": ranks,
                "process": "a child process (its memory is returned; a crash is reported)",
                "output": show(self.output),
            }
        )
        return out


@dataclass(frozen=True, kw_only=True)
class BuildStep(Step):
    kind: ClassVar[str] = "build"
    checkpoint: Path
    output: Path
    flags: tuple[tuple[str, str | None], ...]  # every trtllm-build flag after the two folders (None: store_true)

    def title(self) -> str:
        return f"trtllm-build the {self.role} engine ({ROLES_DOC[self.role]})"

    def build_argv(self, exe: str, output_dir: Path, checkpoint: Path | None = None, shown: bool = False) -> list[str]:
        path = show if shown else str
        argv = [exe, "--checkpoint_dir", path(checkpoint or self.checkpoint), "--output_dir", path(output_dir)]
        for flag, value in self.flags:
            argv.append(flag)
            if value is not None:
                argv.append(value)
        return argv

    def command(self) -> list[str]:
        return self.build_argv("trtllm-build", self.output, shown=True)
