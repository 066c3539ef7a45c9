"""TensorRT-LLM runtime: convert checkpoints, run trtllm-build, read engines back, and check the machine (doctor).

`build_engines(plan, recipe, layout, progress=None) -> {role: Path}` is what `specbuild compile` calls for
`runtime: tensorrt-llm`. tensorrt_llm itself is only ever imported in child processes.
"""

from __future__ import annotations


def build_engines(plan, recipe, layout, progress=None):
    from specbuild.trtllm.engines import build_engines as _build

    return _build(plan, recipe, layout, progress)


__all__ = ["build_engines"]
