"""The recipe's `llm_api` section: what the llm-api flavour writes into model.yaml beyond the shared sections."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import PrivateAttr

from specbuild.facts.bounds import CancellationPeriodMs, PositiveInt32
from specbuild.section import Section

RELEASES = ("1.0", "1.1", "1.2", "1.3")


class LlmApiSection(Section):
    """TensorRT-LLM's LLM API (PyTorch backend) as served by Triton's llmapi model (TensorRT-LLM
    triton_backend/all_models/llmapi/tensorrt_llm/1/model.yaml)."""

    release: Literal[RELEASES] | None = None
    """TensorRT-LLM release line whose model.yaml spelling is written (decoding_type names, the speculative_model
    field and the methods differ between lines; 1.3: TensorRT-LLM 1.3.0rc7 and later). Default: taken from where the
    repository will run: deploy.image.tag, deploy.image.trtllm_version, the installed TensorRT-LLM (runtime
    tensorrt-llm), else the newest stable (1.2: Triton 26.03-26.07); check, plan and the report say which and why.
    Written, it must agree with those (compile checks it against the installed one)."""
    instances: PositiveInt32 = 1
    """Triton instances of tensorrt_llm (multi-instance: triton.gpu_device_ids is split into this many groups of
    tp_size * pp_size GPUs; launched without MPI)."""
    nodes: PositiveInt32 = 1
    """Nodes the world spans: above 1 every rank runs tritonserver under trtllm-llmapi-launch (srun/mpirun)."""
    cuda_graphs: bool = True
    """CUDA graphs for decode-only batches (cuda_graph_config; false writes null)."""
    disable_overlap_scheduler: bool | None = None
    """Default: true for draft_target and prompt_lookup (TensorRT-LLM's examples pass it), false otherwise."""
    cancellation_check_period_ms: CancellationPeriodMs = 100
    """How often the model polls for cancelled requests (triton_config.cancellation_check_period_ms), 1 to 60000
    (specbuild/facts/bounds.py)."""

    # The choice that filled `release` when the recipe did not write it (specbuild.recipe.llm_release.ReleaseChoice)
    _chosen: Any = PrivateAttr(default=None)
