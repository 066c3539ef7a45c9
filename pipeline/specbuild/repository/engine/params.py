"""Parameter values of the Triton models, derived from the recipe (TensorRT-LLM
triton_backend/all_models/inflight_batcher_llm/*/config.pbtxt@2a9abd95, examples/draft_target_model/README.md@567239f).

One source of truth for the repository writer and for `specbuild plan`. `spec`: the recipe's speculation as the
command resolved it (specbuild.runtimes.build).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from specbuild.methods.draft_target import DraftModel
from specbuild.repository.engine import speculation_params

if TYPE_CHECKING:
    from specbuild.recipe.schema import Recipe
    from specbuild.repository.engine.core import EngineCore
    from specbuild.speculation import Speculation

EXECUTOR_WORKER_PATH = "/opt/tritonserver/backends/tensorrtllm/trtllmExecutorWorker"


def core_models(recipe: Recipe, spec: Speculation, role: str) -> list[str]:
    """The engine-backed models of a repository: the target, plus the draft for draft-target."""
    if role == "target" and spec.has_draft_engine:
        return ["tensorrt_llm", speculation_params.DRAFT_MODEL_NAME]
    return ["tensorrt_llm"]


def repository_models(recipe: Recipe, spec: Speculation, role: str) -> list[str]:
    return ["preprocessing", *core_models(recipe, spec, role), "postprocessing", "ensemble", "tensorrt_llm_bls"]


def bls_driven(spec: Speculation, role: str) -> bool:
    """The BLS runs the speculative loop (draft-target, prompt lookup): core models are called per round."""
    return role == "target" and speculation_params.bls_drafts(spec)


def core_decoupled(recipe: Recipe, spec: Speculation, role: str) -> bool:
    # Draft-target/prompt lookup: the BLS calls the cores once per round and needs one response each
    # (TensorRT-LLM examples/draft_target_model/README.md@567239f: decoupled_mode False on both); otherwise streaming
    # makes the core decoupled.
    return False if bls_driven(spec, role) else recipe.triton.streaming


def kv_cache_fraction(recipe: Recipe, spec: Speculation, role: str) -> float:
    """Split the fraction when draft and target share a GPU (TensorRT-LLM
    examples/draft_target_model/README.md@567239f)."""
    total = recipe.triton.kv_cache_free_gpu_mem_fraction
    if (
        role == "target"
        and spec.has_draft_engine
        and set(recipe.triton.gpu_device_ids) & set(recipe.draft_gpu_device_ids)
    ):
        return round(total / 2, 4)
    return total


def legacy_tensor_names(recipe: Recipe, flavour: EngineCore) -> bool:
    """Which tensor names the repository uses: the recipe's triton.legacy_tensor_names when set, else the
    recipe's runtime's (the tensorrt-llm runtime asks the installed backend's version; others use the current
    names)."""
    if recipe.triton.legacy_tensor_names is not None:
        return recipe.triton.legacy_tensor_names
    return flavour.legacy_tensor_names()


def core_parameters(recipe: Recipe, spec: Speculation, role: str, model: str, engine_dir: Path) -> dict[str, str]:
    """config.pbtxt parameters of `tensorrt_llm` / `tensorrt_llm_draft` (every must-have key: tensorrtllm_backend
    inflight_batcher_llm/src/model_state.cc@v0.19.0)."""
    draft = model == speculation_params.DRAFT_MODEL_NAME
    gpu_ids = recipe.draft_gpu_device_ids if draft else recipe.triton.gpu_device_ids
    exclude = False if bls_driven(spec, role) else recipe.triton.exclude_input_in_output
    params = {
        "gpt_model_type": "inflight_fused_batching",
        "gpt_model_path": str(engine_dir),
        "tokenizer_dir": str(recipe.tokenizer_dir),
        "xgrammar_tokenizer_info_path": "",
        "guided_decoding_backend": "",
        "max_beam_width": "1",
        "batch_scheduler_policy": "guaranteed_no_evict",
        "kv_cache_free_gpu_mem_fraction": str(kv_cache_fraction(recipe, spec, role)),
        "enable_kv_cache_reuse": "true",
        "exclude_input_in_output": "true" if exclude else "false",
        "normalize_log_probs": "true",
        "enable_chunked_context": "false",
        "cancellation_check_period_ms": "100",
        "stats_check_period_ms": "100",
        "gpu_device_ids": ",".join(str(i) for i in gpu_ids),
        "executor_worker_path": EXECUTOR_WORKER_PATH,
        "FORCE_CPU_ONLY_INPUT_TENSORS": "no",
    }
    if recipe.triton.stream_interval != 1:  # the reference core's (refused where the core cannot honour it)
        params["stream_interval"] = str(recipe.triton.stream_interval)
    if role == "target" and not draft:
        params.update(speculation_params.core_parameters(spec))
    participants = launch(recipe, role, spec).get("participant_ids")
    if participants:
        params["speculative_decoding_fast_logits"] = "true"
        params["participant_ids"] = participants[model]
    return params


def preprocessing_parameters(recipe: Recipe) -> dict[str, str]:
    """preprocessing parameters (preprocessing/config.pbtxt@v0.19.0). multimodal_model_path is present and empty: text
    only."""
    return {"tokenizer_dir": str(recipe.tokenizer_dir), "add_special_tokens": "true", "multimodal_model_path": ""}


def postprocessing_parameters(recipe: Recipe) -> dict[str, str]:
    """postprocessing parameters (postprocessing/config.pbtxt@v0.19.0). Decoding follows upstream's postprocessing:
    skip_special_tokens true and the tokenizer's own clean_up_tokenization_spaces."""
    return {"tokenizer_dir": str(recipe.tokenizer_dir), "skip_special_tokens": "true"}


def bls_parameters(recipe: Recipe, spec: Speculation, role: str) -> dict[str, str]:
    """tensorrt_llm_bls parameters (tensorrt_llm_bls/config.pbtxt@bff88ea) plus specbuild's drafting defaults for
    BLS-driven methods.

    exclude_input_in_output: what the BLS returns when a request does not say (the core models of BLS-driven
    methods always return the input; the BLS strips it)."""
    params = {
        "accumulate_tokens": "false",
        "tensorrt_llm_model_name": "tensorrt_llm",
        "exclude_input_in_output": "true" if recipe.triton.exclude_input_in_output else "false",
        "tensorrt_llm_decoupled": "true" if core_decoupled(recipe, spec, role) else "false",
    }
    if role != "target":
        return params
    if speculation_params.bls_drafts(spec):
        # the BLS checks up front that every round's prompt (the text so far) fits the engines
        params["max_draft_len"] = str(spec.max_draft_len)
        params["max_input_len"] = str(recipe.build.max_input_len)
        params["max_seq_len"] = str(recipe.build.max_seq_len)
    params.update(speculation_params.bls_parameters(spec))
    return params


def launch(recipe: Recipe, role: str, spec: Speculation) -> dict:
    """How the GPU repository is launched (tensorrtllm_backend scripts/launch_triton_server.py@v0.19.0)."""
    world = recipe.build.tp_size * recipe.build.pp_size
    draft = spec.params
    if role == "target" and isinstance(draft, DraftModel):
        # Two TensorRT-LLM models: orchestrator mode (--multi-model); workers are spawned per model, unless fast
        # logits need pre-spawned ranks: rank 0 orchestrates, then the draft's ranks, then the target's
        # (TensorRT-LLM examples/draft_target_model/README.md@567239f).
        names = ["tensorrt_llm", speculation_params.DRAFT_MODEL_NAME]
        if not draft.fast_logits:
            return {"mode": "orchestrator", "world_size": 1, "multi_model": True, "tensorrt_llm_model_names": names}
        draft_ranks = list(range(1, 1 + draft.tp_size))
        target_ranks = list(range(1 + draft.tp_size, 1 + draft.tp_size + world))
        return {
            "mode": "orchestrator",
            "world_size": 1 + draft.tp_size + world,
            "multi_model": True,
            "disable_spawn_processes": True,
            "tensorrt_llm_model_names": names,
            "participant_ids": {
                speculation_params.DRAFT_MODEL_NAME: ",".join(map(str, draft_ranks)),
                "tensorrt_llm": ",".join(map(str, target_ranks)),
            },
        }
    return {"mode": "leader", "world_size": world, "multi_model": False, "tensorrt_llm_model_names": ["tensorrt_llm"]}
