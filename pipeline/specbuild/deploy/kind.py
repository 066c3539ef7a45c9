"""Which kind of bundle a recipe gets: its runtime's flavour (specbuild.runtimes). Every per-kind piece of the
bundle (launch plan, world, mounts, image policy, recipe rules, repository cross-checks) is a dict keyed by it:

- "engine": TensorRT engines behind the C++ tensorrtllm backend (ensemble/BLS repository, mpirun launch script);
- "llm-api": TensorRT-LLM's PyTorch backend behind NVIDIA's llmapi Python model (one tensorrt_llm model configured
  by model.yaml; single process, multi-instance, or trtllm-llmapi-launch on every rank across nodes).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from specbuild.recipe.schema import Recipe

ENGINE, LLM_API = "engine", "llm-api"


def deploy_kind(recipe: Recipe) -> str:
    """The recipe's flavour: the `flavour` of the runtime it resolves to (specbuild.runtimes.REGISTRY is keyed by
    the recipe's runtime and flavour; tests/runtimes check each runtime class says the flavour it is registered
    under)."""
    return recipe.flavour
