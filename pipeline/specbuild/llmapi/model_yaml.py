"""`1/model.yaml` of the llm-api flavour, written from the recipe with every value explicit (llmapi fact sheet §3,
§4). Everything but `triton_config` goes to `tensorrt_llm.LLM(**args)`, whose pydantic arguments forbid unknown
keys (ARGS-1.2 `BaseLlmArgs.model_config`), so only keys the release knows are written.

The baseline is the same file without `speculative_config`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from specbuild.engine_facts import DEFAULT_MAX_NUM_TOKENS
from specbuild.speculation import DynamicTree, Speculation

FILE = "model.yaml"

# decoding_type spelling per release (llmapi fact sheet §1.4): 1.0/1.1 map `Eagle` to EAGLE-3 and know
# `DraftTarget`; 1.2 made speculative_config a discriminated union with `Eagle3` and `Draft_Target`.
DECODING_TYPES = {
    "1.0": {"eagle3": "Eagle", "draft_target": "DraftTarget", "prompt_lookup": "NGram", "mtp": "MTP"},
    "1.1": {"eagle3": "Eagle", "draft_target": "DraftTarget", "prompt_lookup": "NGram", "mtp": "MTP"},
    "1.2": {"eagle3": "Eagle3", "draft_target": "Draft_Target", "prompt_lookup": "NGram", "mtp": "MTP"},
    "1.3": {"eagle3": "Eagle3", "draft_target": "Draft_Target", "prompt_lookup": "NGram", "mtp": "MTP"},
}
# ≤1.1 knows only speculative_model_dir; 1.2 renamed it speculative_model (the old name stays an alias).
DRAFT_FIELD = {"1.0": "speculative_model_dir", "1.1": "speculative_model_dir", "1.2": "speculative_model",
               "1.3": "speculative_model"}
RELEASES_WITH_LAYER_CHOICE = ("1.1", "1.2", "1.3")  # eagle3_layers_to_capture exists from 1.1 (§1.4)
RELEASES_WITH_ONE_MODEL_FIELD = ("1.0", "1.1", "1.2")  # eagle3_one_model: absent from the 1.3.0rc27 signature
RELEASES_WITH_DYNAMIC_TREE = ("1.3",)  # use_dynamic_tree drafting arrived after 1.2 (§4.2, §6.8)
# Methods TensorRT-LLM's examples run with the overlap scheduler off (DOC-SD DraftTarget and NGram examples)
OVERLAP_OFF = ("draft_target", "prompt_lookup")


def speculative_config(spec: Speculation, release: str, *, path: Callable[[Path], str] = str,
                       schedule: dict[int, int] | None = None) -> dict[str, Any] | None:
    """The speculative_config dict for `spec` in `release`'s spelling; None without speculation.
    `path` writes a checkpoint path (absolute in the file, relative in a plan); `schedule` is a
    draft_len_schedule (batch size -> draft length)."""
    if not spec.speculative:
        return None
    decoding_type = DECODING_TYPES[release][spec.method]
    out: dict[str, Any] = {"decoding_type": decoding_type}
    if spec.mtp is not None:
        out["num_nextn_predict_layers"] = spec.mtp.num_nextn_predict_layers
    else:
        out["max_draft_len"] = spec.max_draft_len
    model = spec.eagle3.path if spec.eagle3 is not None else spec.draft_model.path if spec.draft_model else None
    if model is not None:
        out[DRAFT_FIELD[release]] = path(model)
    if spec.eagle3 is not None:
        if release in RELEASES_WITH_ONE_MODEL_FIELD:
            out["eagle3_one_model"] = True  # the one-model worker (two-model is deprecated)
        if spec.eagle3.layers_to_capture is not None and release in RELEASES_WITH_LAYER_CHOICE:
            out["eagle3_layers_to_capture"] = sorted(spec.eagle3.layers_to_capture)
        if isinstance(spec.tree, DynamicTree):
            out.update(use_dynamic_tree=True, dynamic_tree_max_topK=spec.tree.top_k)
    if spec.prompt_lookup is not None:
        # ≤1.1 defaults max_matching_ngram_size to 0 (§4.4): always written; the pool flags are the 1.2 defaults
        out.update(max_matching_ngram_size=spec.prompt_lookup.max_matching_ngram_size, is_keep_all=True,
                   is_use_oldest=True, is_public_pool=True)
    if schedule:
        out["draft_len_schedule"] = {int(k): int(v) for k, v in sorted(schedule.items())}
    return out


def kv_cache_fraction(recipe) -> float:
    """The recipe's fraction, divided among the instances that share a GPU (BK docs/llmapi.md: two instances on
    one GPU need a lower free_gpu_memory_fraction)."""
    t, b = recipe.triton, recipe.build
    needed = recipe.llm_api.instances * b.tp_size * b.pp_size
    sharing = max(1, -(-needed // max(1, len(set(t.gpu_device_ids)))))
    return round(t.kv_cache_free_gpu_mem_fraction / sharing, 4)


def model_yaml(recipe, spec: Speculation, *, role: str = "target", path: Callable[[Path], str] = str,
               schedule: dict[int, int] | None = None) -> dict[str, Any]:
    """The whole model.yaml as a dict (insertion order is the file's order). role: target | baseline (the
    baseline has no speculative_config)."""
    a, b, t = recipe.llm_api, recipe.build, recipe.triton
    speculative = role == "target" and spec.speculative
    overlap_off = a.disable_overlap_scheduler
    if overlap_off is None:
        overlap_off = speculative and spec.method in OVERLAP_OFF
    args: dict[str, Any] = {
        "model": path(recipe.model_dir),
        "tokenizer": path(recipe.tokenizer_dir),
        "trust_remote_code": recipe.model.trust_remote_code,
        "dtype": recipe.model.dtype,
    }
    if a.release in ("1.0", "1.1", "1.2"):
        args["backend"] = "pytorch"  # the shipped yaml's key; a deprecated Literal in 1.2 (§1.3, §3.4)
    args.update({
        "tensor_parallel_size": b.tp_size,
        "pipeline_parallel_size": b.pp_size,
        "max_batch_size": b.max_batch_size,
        "max_num_tokens": b.max_num_tokens or DEFAULT_MAX_NUM_TOKENS,
        "max_input_len": b.max_input_len,
        "max_seq_len": b.max_seq_len,
        "max_beam_width": b.max_beam_width,
        "kv_cache_config": {"free_gpu_memory_fraction": kv_cache_fraction(recipe),
                            "enable_block_reuse": True, "tokens_per_block": b.tokens_per_block},
        # CudaGraphConfig (1.0+ names): graphs for decode-only batches up to max_batch_size; null turns them off
        "cuda_graph_config": {"max_batch_size": b.max_batch_size, "enable_padding": False} if a.cuda_graphs else None,
        "disable_overlap_scheduler": bool(overlap_off),
    })
    if speculative:
        args["speculative_config"] = speculative_config(spec, a.release, path=path, schedule=schedule)
    args["triton_config"] = {
        "max_batch_size": 0,  # the llmapi model takes one prompt per request (§2.7)
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
    return "# written by specbuild from the recipe: every value explicit (TensorRT-LLM LLM arguments + triton_config)\n" \
        + buf.getvalue()


def load(text: str) -> dict[str, Any]:
    from ruamel.yaml import YAML

    data = YAML(typ="safe", pure=True).load(text)
    return data if isinstance(data, dict) else {}
