"""`1/model.yaml` of the llm-api flavour, written from the recipe with every value explicit (TensorRT-LLM
triton_backend/all_models/llmapi/tensorrt_llm/1/model.yaml@c8c6df0, tensorrt_llm/llmapi/llm_args.py). Everything but
`triton_config` goes to `tensorrt_llm.LLM(**args)`, whose pydantic arguments forbid unknown keys
(`BaseLlmArgs.model_config` in llm_args.py of main after 1.3.0rc3), so only keys the release knows are written.

The baseline is the same file without `speculative_config`.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from specbuild.standalone import draft_len_schedule
from specbuild.facts.engine_facts import DEFAULT_MAX_NUM_TOKENS
from specbuild.methods import pack_for
from specbuild.methods.pack import Refusal
from specbuild.repository.llmapi.releases import RULES
from specbuild.speculation import Speculation

FILE = "model.yaml"
# How each release says "this draft length at this many requests" (tensorrt_llm/llmapi/llm_args.py
# DecodingBaseConfig per release): max_concurrency (PR #6676, 2025-08: speculation off above N active requests,
# Drafter.should_use_spec_decode) from 1.0; draft_len_schedule was read only in llm_args.py of main after 1.3.0rc3,
# where it is read as "batch size >= key" (Drafter.get_draft_len_for_batch_size: the largest key <= batch size),
# and whether 1.2.x has it is not known (specbuild.repository.llmapi.releases), so 1.2 gets max_concurrency, which 1.1 and
# that later source both have; after that source (PR #10860, speculative/utils.py get_draft_len_for_batch_size)
# each key is the largest batch size its length applies to and larger batches draft nothing, and max_concurrency
# excludes it.
SCHEDULE_FIELD = {
    "1.0": "max_concurrency",
    "1.1": "max_concurrency",
    "1.2": "max_concurrency",
    "1.3": "draft_len_schedule_upper_bounds",
}
# Releases whose drafter-less one-model paths (EAGLE-3 one-model, MTP) follow the load too: the schedule there
# arrived with PR #10860 ("Dynamic draft length on spec decode one-model path"); before it only the two-model
# drafters (NGram, Draft_Target; PR #8194 "dynamic draft length, stage 1": MethodPack.two_model_drafter) read it.
RELEASES_WITH_ONE_MODEL_SCHEDULE = ("1.3",)


def schedule_refusal(spec: Speculation, release: str) -> str | None:
    """Why `release` cannot follow the recipe's draft_len_schedule for `spec` (None: it can)."""
    points = spec.draft_len_schedule
    if not points:
        return None
    if not pack_for(spec).two_model_drafter and release not in RELEASES_WITH_ONE_MODEL_SCHEDULE:
        return (
            f"TensorRT-LLM {release} follows draft lengths per batch size in its two-model drafters only "
            "(NGram, Draft_Target: PR #8194); the one-model path of EAGLE-3 and MTP follows "
            "draft_len_schedule from PR #10860, after 1.2 — set llm_api.release: 1.3 if you run it, or remove "
            "adaptive"
        )
    if SCHEDULE_FIELD[release] == "max_concurrency" and draft_len_schedule.max_concurrency(list(points)) is None:
        why = (
            "no draft_len_schedule (it arrived after 1.1)"
            if release in ("1.0", "1.1")
            else "draft_len_schedule is known only from sources after 1.3.0rc3, not at 1.2.x"
        )
        return (
            f"TensorRT-LLM {release} has max_concurrency only (speculation at full length up to N requests, "
            f"off above): {why} — give a schedule that only turns speculation off, {{1: {points[0][1]}, "
            "N+1: 0}, or set llm_api.release: 1.3"
        )
    return None


def schedule_fields(spec: Speculation, release: str, max_batch_size: int) -> dict[str, Any]:
    """The speculative_config keys that carry the recipe's schedule in `release`'s spelling ({} without one)."""
    points = list(spec.draft_len_schedule or ())
    if not points or schedule_refusal(spec, release):
        return {}
    field = SCHEDULE_FIELD[release]
    if field == "max_concurrency":
        return {"max_concurrency": draft_len_schedule.max_concurrency(points)}
    if field == "draft_len_schedule_upper_bounds":
        return {"draft_len_schedule": draft_len_schedule.upper_bound_form(points, max_batch_size)}
    return {"draft_len_schedule": dict(points)}


# The acceptance-rate switch (recipe adaptive.disable_below), a field of every speculative_config member
# (DecodingBaseConfig, tensorrt_llm/llmapi/llm_args.py):
# - main @0004396 (release line 1.3): acceptance_rate_threshold (float in [0, 1]) and acceptance_rate_window_size
#   (NonNegativeInt, 0 / unset = off): "speculation will be disabled permanently once the rolling average over the
#   last N speculation-enabled decoding iterations" of the "true acceptance rate (accepted_draft_tokens /
#   drafted_tokens)" drops below the threshold; PR #12905 (2026-04-09, "BREAKING: Acceptance rate based speculation
#   off in one model path") renamed the fields and records "one batch-level acceptance-rate sample per
#   speculation[-enabled iteration]" (speculation_gate.py `SpeculationGate.record_acceptance_rate`).
# - the 1.1-era copy and post-1.3.0rc3 main (llm_args.py read by content): acceptance_window /
#   acceptance_length_threshold, the rolling mean acceptance *length* (avg decoded tokens per iteration - 1) over the
#   last N *completed requests* (PR #7283, 2025-08-27), on the two-model path only; the 1.0-era copy has neither.
GATE_FIELDS = {"1.3": ("acceptance_rate_threshold", "acceptance_rate_window_size")}
_OLD_GATE = (
    "acceptance_window / acceptance_length_threshold instead, which mean something else: the rolling mean "
    "acceptance length (accepted draft tokens per iteration) over the last N completed requests, on the two-model "
    "path only (PR #7283); a rate over speculating iterations does not convert into a length over requests (the "
    "length scales with the draft length, and the windows count different things)"
)
GATE_REFUSALS = {
    "1.0": "no acceptance switch (DecodingBaseConfig of the 1.0 era has none; it arrived with PR #7283, 2025-08)",
    "1.1": _OLD_GATE,
    "1.2": _OLD_GATE,
}


def disable_below_refusal(spec: Speculation, release: str) -> str | None:
    """Why `release` cannot write the recipe's adaptive.disable_below (None: it can)."""
    if spec.disable_below is None or release in GATE_FIELDS:
        return None
    return (
        f"TensorRT-LLM {release} has {GATE_REFUSALS[release]} — set llm_api.release: 1.3 (acceptance_rate_threshold "
        "/ acceptance_rate_window_size, PR #12905) if you run it, or remove adaptive.disable_below"
    )


def disable_below_unknown(spec: Speculation, release: str) -> str | None:
    """What is not known about how `release` reads the switch (`check` prints it)."""
    if spec.disable_below is None or release not in GATE_FIELDS:
        return None
    return (
        "acceptance_rate_threshold / acceptance_rate_window_size came with PR #12905 (merged 2026-04-09); "
        "1.3.0 release candidates cut before it still have acceptance_window / acceptance_length_threshold and "
        "refuse the new names as extra fields, and which candidate first has them was not read"
    )


def gate_fields(spec: Speculation, release: str) -> dict[str, Any]:
    """The speculative_config keys of the recipe's adaptive.disable_below in `release`'s spelling ({} without one)."""
    gate = spec.disable_below
    if gate is None or release not in GATE_FIELDS:
        return {}
    threshold, window = GATE_FIELDS[release]
    return {threshold: gate.acceptance_rate, window: gate.window}


def speculative_config(
    spec: Speculation,
    release: str,
    *,
    path: Callable[[Path], str] = str,
    schedule: dict[int, int] | None = None,
    max_batch_size: int | None = None,
) -> dict[str, Any] | None:
    """The speculative_config dict for `spec` in `release`'s spelling; None without speculation.
    `path` writes a checkpoint path (absolute in the file, relative in a plan); `schedule` overrides the recipe's
    draft_len_schedule (batch size -> draft length, the recipe's meaning), written in the release's spelling
    (`max_batch_size` bounds the spelling after 1.2)."""
    if not spec.speculative:
        return None
    out = pack_for(spec).speculative_config(spec, RULES[release].for_packs(), path)
    assert not isinstance(out, Refusal), out  # the flavour's checks refuse the method first
    if schedule:
        spec = replace(spec, draft_len_schedule=tuple(sorted((int(k), int(v)) for k, v in schedule.items())))
    largest = max_batch_size or max((k for k, _ in spec.draft_len_schedule or ()), default=1)
    out.update(schedule_fields(spec, release, largest))
    out.update(gate_fields(spec, release))
    return out


def kv_cache_fraction(recipe) -> float:
    """The recipe's fraction, divided among the instances that share a GPU (tensorrtllm_backend docs/llmapi.md@0b9d7d5:
    two instances on one GPU need a lower free_gpu_memory_fraction)."""
    t, b = recipe.triton, recipe.build
    needed = recipe.llm_api.instances * b.tp_size * b.pp_size
    sharing = max(1, -(-needed // max(1, len(set(t.gpu_device_ids)))))
    return round(t.kv_cache_free_gpu_mem_fraction / sharing, 4)


def model_yaml(
    recipe,
    spec: Speculation,
    *,
    role: str = "target",
    path: Callable[[Path], str] = str,
    schedule: dict[int, int] | None = None,
) -> dict[str, Any]:
    """The whole model.yaml as a dict (insertion order is the file's order). role: target | baseline (the
    baseline has no speculative_config)."""
    a, b, t = recipe.llm_api, recipe.build, recipe.triton
    speculative = role == "target" and spec.speculative
    overlap_off = a.disable_overlap_scheduler
    if overlap_off is None:
        overlap_off = speculative and pack_for(spec).overlap_off  # as TensorRT-LLM's examples run it
    args: dict[str, Any] = {
        "model": path(recipe.model_dir),
        "tokenizer": path(recipe.tokenizer_dir),
        "trust_remote_code": recipe.model.trust_remote_code,
        "dtype": recipe.model.dtype,
    }
    if a.release in ("1.0", "1.1", "1.2"):
        args["backend"] = "pytorch"  # the shipped yaml's key; a deprecated Literal in 1.2 (llm_args.py)
    args.update(
        {
            "tensor_parallel_size": b.tp_size,
            "pipeline_parallel_size": b.pp_size,
            "max_batch_size": b.max_batch_size,
            "max_num_tokens": b.max_num_tokens or DEFAULT_MAX_NUM_TOKENS,
            "max_input_len": b.max_input_len,
            "max_seq_len": b.max_seq_len,
            "max_beam_width": b.max_beam_width,
            "kv_cache_config": {
                "free_gpu_memory_fraction": kv_cache_fraction(recipe),
                "enable_block_reuse": True,
                "tokens_per_block": b.tokens_per_block,
            },
            # CudaGraphConfig (1.0+ names): graphs for decode-only batches up to max_batch_size; null turns them off
            "cuda_graph_config": {"max_batch_size": b.max_batch_size, "enable_padding": False}
            if a.cuda_graphs
            else None,
            "disable_overlap_scheduler": bool(overlap_off),
        }
    )
    if t.stream_interval != 1:  # the LLM's default (1) is left to each release
        args["stream_interval"] = t.stream_interval
    if speculative:
        args["speculative_config"] = speculative_config(
            spec, a.release, path=path, schedule=schedule, max_batch_size=b.max_batch_size
        )
    args["triton_config"] = {
        "max_batch_size": 0,  # the llmapi model takes one prompt per request (llmapi 1/model.py@b35ac1b)
        "decoupled": t.streaming,
        "cancellation_check_period_ms": a.cancellation_check_period_ms,
    }
    return args


def dump(data: dict[str, Any]) -> str:
    """YAML text of a model.yaml dict (block style, keys in order, no anchors)."""
    import io

    from ruamel.yaml import YAML

    yaml = YAML(typ="safe", pure=True)
    yaml.default_flow_style = False
    yaml.sort_base_mapping_type_on_output = False
    buf = io.StringIO()
    yaml.dump(data, buf)
    return (
        "# written by specbuild from the recipe: every value explicit (TensorRT-LLM LLM arguments + triton_config)\n"
        + buf.getvalue()
    )


def load(text: str) -> dict[str, Any]:
    from ruamel.yaml import YAML

    data = YAML(typ="safe", pure=True).load(text)
    return data if isinstance(data, dict) else {}
