"""adapt's side of each runtime, by the recipe's Runtime class (no runtime name compared: the seam of
tests/foundation/test_seam.py): the reference runtime runs everything on a CPU; the TensorRT-LLM runtime's adapt
runs on a GPU machine (specbuild.adapt.runtimes.trtllm, docs/gpu.md)."""

from __future__ import annotations

from pathlib import Path

from specbuild.adapt.runtimes.base import AdaptRuntime
from specbuild.adapt.runtimes.reference import ReferenceEngineAdapt, ReferenceLlmApiAdapt
from specbuild.adapt.runtimes.trtllm import TrtllmAdapt
from specbuild.errors import UserError
from specbuild.reference.llmapi_runtime import ReferenceLlmApiRuntime
from specbuild.reference.runtime import ReferenceRuntime
from specbuild.runtimes.build import Build
from specbuild.trtllm.llmapi_runtime import TrtllmLlmApiRuntime
from specbuild.trtllm.runtime import TrtllmRuntime

# Runtime class -> its adapt side (the first match wins)
TABLE: tuple[tuple[type, type], ...] = (
    (ReferenceRuntime, ReferenceEngineAdapt),
    (ReferenceLlmApiRuntime, ReferenceLlmApiAdapt),
    (TrtllmRuntime, TrtllmAdapt),
    (TrtllmLlmApiRuntime, TrtllmAdapt),
)


def adapt_runtime(build: Build, work: Path) -> AdaptRuntime:
    for runtime_cls, adapt_cls in TABLE:
        if isinstance(build.runtime, runtime_cls):
            return adapt_cls(build, work)
    raise UserError(f"adapt: the {type(build.runtime).__name__} runtime has no adapt side yet")
