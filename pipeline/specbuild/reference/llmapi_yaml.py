"""`1/model.yaml` of an llm-api repository, read the way TensorRT-LLM reads it, for the CPU rehearsal.

NVIDIA's llmapi model (TensorRT-LLM triton_backend/all_models/llmapi/tensorrt_llm/1/model.py@b35ac1b):
  - the file is `os.path.join(<model dir>, $LLM_CONFIG_PATH or "model.yaml")` (an absolute LLM_CONFIG_PATH wins);
  - `triton_config` is the model's own: max_batch_size and decoupled are required (KeyError otherwise),
    cancellation_check_period_ms defaults to 100; other keys there are not read;
  - everything else goes to `tensorrt_llm.LLM(**args)`, whose pydantic arguments forbid unknown keys
    (`BaseLlmArgs.model_config` extra="forbid"; every sub-config is a `StrictBaseModel`), so an unknown key fails
    model load, and `speculative_config` is parsed by its `decoding_type` (llm_args.py `DecodingBaseConfig`).

Here the same rules as pydantic models (extra="forbid"), covering every key specbuild's model.yaml writer
(specbuild/repository/llmapi/model_yaml.py) can write, and the LLM defaults of tensorrt_llm/llmapi/llm_args.py (main
after 1.3.0rc3) for what it leaves out. Options TensorRT-LLM has but the reference runtime cannot honour are refused
with the reason; options that only size GPU memory (kv_cache_config, cuda_graph_config, the overlap scheduler) are
accepted and have no effect on the CPU. `read_model_yaml` returns the typed `LlmApiSettings` the reference model serves
(llmapi_engine.py builds its engines). Light: no torch.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, NonNegativeInt, ValidationError, confloat

from specbuild.reference.decoder import speculation_gate
from specbuild.standalone import draft_len_schedule
from specbuild.facts.bounds import (
    MAX_CANCELLATION_CHECK_PERIOD_MS,
    NonNegativeInt32,
    PositiveInt32,
    draft_len_problem,
    max_seq_len_problem,
    position_limit,
)
from specbuild.errors import UserError
from specbuild.methods import METHODS
from specbuild.methods.llm_args import DecodingBaseConfig, Strict
from specbuild.methods.pack import MethodPack, Unservable

FILE = "model.yaml"
ENV = "LLM_CONFIG_PATH"
DEFAULT_CANCELLATION_CHECK_PERIOD_MS = 100  # model.py@b35ac1b initialize

# LLM arguments TensorRT-LLM has (llm_args.py, main after 1.3.0rc3) that the reference runtime cannot honour: refused
# with the reason.
UNSUPPORTED_ARGS = {
    "context_parallel_size": "the reference runtime runs one CPU process",
    "moe_tensor_parallel_size": "the reference runtime runs one CPU process",
    "moe_expert_parallel_size": "the reference runtime runs one CPU process",
    "gpus_per_node": "the reference runtime runs one CPU process",
    "enable_attention_dp": "the reference runtime runs one CPU process",
    "enable_chunked_prefill": "the reference executor prefills whole prompts",
    "lora_config": "the reference runtime has no LoRA",
    "quant_config": "the reference runtime computes in float32 (no quantization)",
    "guided_decoding_backend": "the reference runtime has no guided decoding",
    "logits_post_processors": "the reference runtime has no logits post-processors",
    "revision": "the reference model loads local Hugging Face folders only",
    "sampler_type": "the reference runtime has one sampler (TorchSampler semantics)",
}


class ModelYamlError(UserError):
    """model.yaml cannot be served: the model fails to load with this message (as the LLM's would)."""


class KvCacheConfig(Strict):
    """KvCacheConfig (llm_args.py): sizes the GPU KV pool (no effect on the CPU); enable_block_reuse turns the
    reference executor's KV reuse on or off, as it does the LLM's block reuse."""

    free_gpu_memory_fraction: confloat(ge=0.0, le=1.0) | None = 0.9
    enable_block_reuse: bool = True
    tokens_per_block: PositiveInt32 = 32
    max_tokens: PositiveInt32 | None = None
    enable_partial_reuse: bool = True
    host_cache_size: NonNegativeInt | None = None
    dtype: str = "auto"


class CudaGraphConfig(Strict):
    """CudaGraphConfig (1.0+ names): CUDA graphs for decode-only batches; no effect on the CPU."""

    batch_sizes: list[PositiveInt32] | None = None
    max_batch_size: NonNegativeInt32 = 0
    enable_padding: bool = False


class LlmArgs(Strict):
    """The LLM arguments of model.yaml (everything but triton_config; TorchLlmArgs of llm_args.py)."""

    model: str
    tokenizer: str | None = None
    trust_remote_code: bool = False
    dtype: Literal["auto", "float32", "float16", "bfloat16"] = "auto"
    backend: Literal["pytorch"] | None = None
    tensor_parallel_size: PositiveInt32 = 1
    pipeline_parallel_size: PositiveInt32 = 1
    max_batch_size: PositiveInt32 = 2048
    max_num_tokens: PositiveInt32 = 8192
    max_input_len: PositiveInt32 = 1024
    max_seq_len: PositiveInt32 | None = None
    max_beam_width: PositiveInt32 = 1
    kv_cache_config: KvCacheConfig = Field(default_factory=KvCacheConfig)
    cuda_graph_config: CudaGraphConfig | None = Field(default_factory=CudaGraphConfig)
    disable_overlap_scheduler: bool = False
    stream_interval: PositiveInt32 = 1  # streaming: a response every N iterations (and the first and last)
    speculative_config: dict[str, Any] | None = None  # parsed by decoding_type (below)


@dataclass(frozen=True)
class LlmApiSettings:
    """What the reference model serves, read from model.yaml."""

    path: Path  # the model.yaml read
    model_dir: Path
    tokenizer_dir: Path
    trust_remote_code: bool
    max_batch_size: int
    max_num_tokens: int
    max_input_len: int
    max_seq_len: int
    method: str  # the method's pack (its name), or none
    max_draft_len: int
    decoding: dict[str, Any]  # specbuild.decoding keys the reference method reads
    draft_dir: Path | None  # a draft model's folder (draft_target)
    weights: dict[str, Path]  # the folders the method's decoder reads beside the model, by name (eagle3: its head)
    decoding_type: str | None
    decoupled: bool
    triton_max_batch_size: int
    cancellation_check_period_ms: int
    stream_interval: int = 1  # LLM argument: streamed responses every N decoding iterations (and first and last)
    enable_kv_cache_reuse: bool = True  # kv_cache_config.enable_block_reuse (the LLM API's default: true)
    notes: tuple[str, ...] = ()  # accepted options that have no effect on the CPU (logged at load)


# ---------------------------------------------------------------------------------------------------- reading
def model_yaml_path(model_dir: Path) -> Path:
    """NVIDIA's `get_model_config`: os.path.join(model dir, $LLM_CONFIG_PATH or model.yaml)."""
    return Path(os.path.join(str(model_dir), os.environ.get(ENV) or FILE))


def load_yaml(path: Path) -> dict:
    """The file as NVIDIA's model reads it (yaml.safe_load); ModelYamlError when missing or not a mapping."""
    if not path.is_file():
        raise ModelYamlError(
            f"'{path.name}' containing TRT-LLM engine args not found in '{path.parent}' — write "
            f"it with specbuild compile, or point ${ENV} at it"
        )
    try:
        import yaml

        data = yaml.safe_load(path.read_text())
    except Exception as e:  # noqa: BLE001 - a parse error of any kind
        raise ModelYamlError(f"{path}: Failed to parse YAML engine config: {e}") from None
    if not isinstance(data, dict):
        raise ModelYamlError(f"{path}: expected a mapping of LLM arguments, got {type(data).__name__}")
    return data


def triton_config(data: dict, path: Path) -> dict:
    """`triton_config` with the keys NVIDIA's auto_complete_config requires (max_batch_size, decoupled)."""
    tc = data.get("triton_config")
    if not isinstance(tc, dict):
        raise ModelYamlError(
            f"{path}: triton_config is missing — add triton_config: {{max_batch_size: 0, "
            "decoupled: true}} (NVIDIA's model reads both keys)"
        )
    for key in ("max_batch_size", "decoupled"):
        if key not in tc:
            raise ModelYamlError(f"{path}: triton_config.{key} is missing (NVIDIA's model requires it) — add it")
    return tc


def read_model_yaml(path: Path) -> LlmApiSettings:
    """Validate model.yaml as the LLM would and return what to serve; ModelYamlError names the key at fault."""
    data = load_yaml(path)
    tc = triton_config(data, path)
    args = {k: v for k, v in data.items() if k != "triton_config"}
    llm = _validate(LlmArgs, args, path, "")
    decoupled, mbs, period = _triton_values(tc, path)
    _refuse(llm, path)
    model_dir = _local_folder(llm.model, path, "model")
    tokenizer_dir = _local_folder(llm.tokenizer, path, "tokenizer") if llm.tokenizer else model_dir
    positions = position_limit(_hf_config(model_dir))
    max_seq_len = llm.max_seq_len or _derived_max_seq_len(positions, model_dir, path)
    problem = max_seq_len_problem(max_seq_len, positions)
    if problem:  # the served model never runs past its positions
        raise ModelYamlError(f"{path}: max_seq_len {problem} ({model_dir}/config.json)")
    if llm.max_input_len > max_seq_len:
        raise ModelYamlError(
            f"{path}: max_input_len ({llm.max_input_len}) exceeds max_seq_len ({max_seq_len}) — "
            "lower max_input_len or raise max_seq_len"
        )
    method, k, decoding, draft, weights, dtype_name, method_notes = _speculation(
        llm.speculative_config, path, llm.max_batch_size
    )
    problem = draft_len_problem(k, max_seq_len) if k else None
    if problem:
        raise ModelYamlError(f"{path}: speculative_config.max_draft_len {problem}")
    for folder in filter(None, (draft, *weights.values())):  # a draft model and a head run along the sequence too
        problem = max_seq_len_problem(
            max_seq_len, position_limit(_hf_config(folder)), f"the speculative_model's ({folder}/config.json)"
        )
        if problem:
            raise ModelYamlError(f"{path}: max_seq_len {problem}")
    notes = [
        f"{key} is accepted and has no effect on the CPU"
        for key in ("cuda_graph_config", "disable_overlap_scheduler")
        if key in args
    ]
    if "kv_cache_config" in args:
        notes.append(
            "kv_cache_config sizes the GPU's KV pool, which the CPU has not; its enable_block_reuse turns "
            "the reference's KV reuse on or off"
        )
    if llm.dtype not in ("auto", "float32"):
        notes.append(f"dtype {llm.dtype} is recorded; the reference runtime computes in float32")
    notes += method_notes  # what the CPU does not follow of the method's own options (its pack says)
    return LlmApiSettings(
        path=path,
        model_dir=model_dir,
        tokenizer_dir=tokenizer_dir,
        trust_remote_code=llm.trust_remote_code,
        max_batch_size=llm.max_batch_size,
        max_num_tokens=llm.max_num_tokens,
        max_input_len=llm.max_input_len,
        max_seq_len=max_seq_len,
        method=method,
        max_draft_len=k,
        decoding=decoding,
        draft_dir=draft,
        weights=weights,
        decoding_type=dtype_name,
        decoupled=decoupled,
        triton_max_batch_size=mbs,
        cancellation_check_period_ms=period,
        stream_interval=llm.stream_interval,
        enable_kv_cache_reuse=llm.kv_cache_config.enable_block_reuse,
        notes=tuple(notes),
    )


# ---------------------------------------------------------------------------------------------------- pieces
def _validate(model: type[BaseModel], data: Any, path: Path, prefix: str):
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise ModelYamlError(f"{path}: " + "; ".join(_describe(err, prefix) for err in e.errors())) from None


def _describe(err: dict, prefix: str) -> str:
    loc = prefix + ".".join(str(p) for p in err["loc"])
    if err["type"] == "extra_forbidden":
        if not prefix and loc in UNSUPPORTED_ARGS:
            return (
                f"{loc} is a TensorRT-LLM option the reference runtime cannot honour ({UNSUPPORTED_ARGS[loc]}) "
                "— remove it to rehearse on the CPU"
            )
        return (
            f"unknown key {loc} (TensorRT-LLM's LLM arguments forbid unknown keys: extra='forbid') — remove it "
            "or fix its spelling"
        )
    if err["type"] == "missing":
        return f"{loc} is required"
    return f"{loc}={err.get('input')!r}: {err['msg']}"


def _triton_values(tc: dict, path: Path) -> tuple[bool, int, int]:
    try:
        mbs = int(tc["max_batch_size"])
    except (TypeError, ValueError):
        raise ModelYamlError(
            f"{path}: triton_config.max_batch_size={tc['max_batch_size']!r} is not an integer — set 0"
        ) from None
    if mbs != 0:
        raise ModelYamlError(
            f"{path}: triton_config.max_batch_size is {mbs}, but the llmapi model takes one prompt "
            "per request (text_input must be 1-D; requests are batched in flight by the LLM) — set 0"
        )
    decoupled = tc["decoupled"]
    if not isinstance(decoupled, bool):
        raise ModelYamlError(f"{path}: triton_config.decoupled={decoupled!r} — use true or false")
    period = tc.get("cancellation_check_period_ms", DEFAULT_CANCELLATION_CHECK_PERIOD_MS)
    if isinstance(period, bool) or not isinstance(period, int) or not 0 < period <= MAX_CANCELLATION_CHECK_PERIOD_MS:
        raise ModelYamlError(
            f"{path}: triton_config.cancellation_check_period_ms={period!r} — give a number of "
            f"milliseconds from 1 to {MAX_CANCELLATION_CHECK_PERIOD_MS} (a cancelled request decodes "
            "until the next check; NVIDIA's default is 100)"
        )
    if tc.get("multimodal"):
        raise ModelYamlError(
            f"{path}: triton_config.multimodal is set, but the reference runtime serves text models only — remove it"
        )
    return decoupled, mbs, period


def _refuse(llm: LlmArgs, path: Path) -> None:
    for key in ("tensor_parallel_size", "pipeline_parallel_size"):
        if getattr(llm, key) != 1:
            raise ModelYamlError(
                f"{path}: {key} is {getattr(llm, key)}, but the reference runtime runs in one CPU "
                f"process — set {key}: 1, or serve with runtime: tensorrt-llm"
            )
    if llm.max_beam_width != 1:
        raise ModelYamlError(
            f"{path}: max_beam_width is {llm.max_beam_width}, but the reference runtime decodes "
            "with beam width 1 — set max_beam_width: 1"
        )


def _local_folder(value: str, path: Path, key: str) -> Path:
    """A local Hugging Face folder, as the LLM detects one (Path.is_dir(), relative to the server's cwd)."""
    folder = Path(value).expanduser()
    if not folder.is_dir():
        raise ModelYamlError(
            f"{path}: {key}: {value} is not a local folder; the reference runtime loads local "
            "Hugging Face checkpoints only (no hub downloads) — give the checkpoint folder"
        )
    return folder.resolve()


def _hf_config(model_dir: Path) -> dict | None:
    try:
        data = json.loads((model_dir / "config.json").read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _derived_max_seq_len(positions: int | None, model_dir: Path, path: Path) -> int:
    """max_seq_len None: the LLM takes it from the model (max_position_embeddings)."""
    if positions is None:
        raise ModelYamlError(
            f"{path}: max_seq_len is not set and {model_dir}/config.json has no "
            "max_position_embeddings — set max_seq_len"
        )
    return positions


def _pack_of(decoding_type: Any) -> MethodPack | None:
    """The pack whose decoding_type spellings (every release's) include this one."""
    return next((p for p in METHODS.values() if decoding_type in p.decoding_types), None)


def _unserved(pack: MethodPack, decoding_type: str) -> str | None:
    """Why the rehearsal does not serve a decoding_type TensorRT-LLM has (None: it does): the reference runtime's
    refusal, else the LLM API's (the PyTorch backend has no such method)."""
    if pack.rehearsal_config is not None and pack.decoder is not None:
        return None
    if pack.reference_refusal is not None:
        return f"{pack.reference_refusal.why} — use {pack.reference_refusal.instead}"
    return f"TensorRT-LLM's PyTorch backend has no {decoding_type}"


def _speculation(raw: dict | None, path: Path, max_batch_size: int):
    """(method, max_draft_len, decoding keys, draft folder, weights, decoding_type, notes) of speculative_config
    (`max_batch_size`: the LLM's, for a config TensorRT-LLM replaces by it: AUTO)."""
    if raw is None:
        return "none", 0, {}, None, {}, None, ()
    decoding_type = raw.get("decoding_type")
    where = "speculative_config"
    pack = _pack_of(decoding_type)
    if pack is None:
        known = ", ".join(t for p in METHODS.values() if _unserved(p, "") is None for t in p.decoding_types)
        raise ModelYamlError(
            f"{path}: {where}.decoding_type={decoding_type!r} is not one the reference runtime serves "
            f"(Invalid decoding type) — use one of {known}"
        )
    why = _unserved(pack, decoding_type)
    if why is not None:
        raise ModelYamlError(f"{path}: {where}.decoding_type {decoding_type}: {why}")
    cfg = _validate(pack.rehearsal_config, raw, path, f"{where}.")
    in_place = pack.served_in_place(cfg, max_batch_size)
    if in_place is not None:  # what TensorRT-LLM runs instead (AUTO: an NGram config), said at model load
        method, k, decoding, draft, weights, _, notes = _speculation(in_place, path, max_batch_size)
        said = ", ".join(f"{key}: {value}" for key, value in in_place.items())
        return method, k, decoding, draft, weights, decoding_type, (f"{decoding_type} runs {{{said}}}", *notes)
    if not cfg.max_draft_len:  # every linear type's validator (llm_args.py)
        raise ModelYamlError(
            f"{path}: {where}.max_draft_len must be > 0 for {pack.decoding_types[0]} — give the draft length"
        )
    k = int(cfg.max_draft_len)
    schedule = _load_schedule(cfg, k, path, where)
    try:
        served = pack.rehearse(cfg, k)
    except Unservable as e:
        raise ModelYamlError(f"{path}: {where}.{e}") from None
    folder = f"{where}.speculative_model"
    draft = _local_folder(served.draft, path, folder) if served.draft is not None else None
    weights = {name: _local_folder(value, path, folder) for name, value in served.weights.items()}
    decoding = dict(served.decoding)
    if schedule is not None:
        decoding[draft_len_schedule.PARAMETER] = draft_len_schedule.as_text(schedule)
    decoding.update(speculation_gate.decoding_keys(cfg.acceptance_rate_threshold, cfg.acceptance_rate_window_size))
    return pack.name, k, decoding, draft, weights, decoding_type, served.notes


def _load_schedule(cfg: DecodingBaseConfig, k: int, path: Path, where: str) -> list[tuple[int, int]] | None:
    """The draft length per batch size as the reference executor follows it (specbuild/standalone/draft_len_schedule.py):
    draft_len_schedule read as TensorRT-LLM 1.2 reads it ("batch_size >= key uses its draft length", llm_args.py
    `validate_draft_len_schedule_and_sort`), and max_concurrency (speculation off above that many requests,
    `Drafter.should_use_spec_decode`); both together: the schedule, off above max_concurrency. The later
    spelling (after 1.2: each key the largest batch size of its length) is not rehearsed."""
    points = None
    if cfg.draft_len_schedule is not None:
        problems = draft_len_schedule.schedule_problems(cfg.draft_len_schedule, k)
        if problems:
            raise ModelYamlError(
                f"{path}: "
                + "; ".join(
                    f"{where}.draft_len_schedule" + (f"[{key}]" if key is not None else "") + f": {message}"
                    for key, message in problems
                )
            )
        points = sorted(cfg.draft_len_schedule.items())
    if cfg.max_concurrency is not None:
        n = int(cfg.max_concurrency)
        points = [(b, v) for b, v in (points or [(1, k)]) if b <= n] + [(n + 1, 0)]
        if points[0][0] != 1:  # max_concurrency 0: speculation is never on
            points = [(1, 0)]
    return points
