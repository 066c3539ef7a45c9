"""The runtimes specbuild knows, by recipe `runtime` and `flavour`, as names only: what the recipe's schema allows
(specbuild.runtimes loads them)."""

from __future__ import annotations

# (recipe runtime, recipe flavour) -> "module:class"
REGISTRY: dict[tuple[str, str], str] = {
    ("reference", "engine"): "specbuild.reference.runtime:ReferenceRuntime",
    ("tensorrt-llm", "engine"): "specbuild.trtllm.runtime:TrtllmRuntime",
    ("reference", "llm-api"): "specbuild.reference.llmapi_runtime:ReferenceLlmApiRuntime",
    ("tensorrt-llm", "llm-api"): "specbuild.trtllm.llmapi_runtime:TrtllmLlmApiRuntime",
}
NAMES: tuple[str, ...] = tuple(dict.fromkeys(runtime for runtime, _ in REGISTRY))
FLAVOURS: tuple[str, ...] = tuple(dict.fromkeys(flavour for _, flavour in REGISTRY))
DEFAULT, DEFAULT_FLAVOUR = "reference", "engine"
