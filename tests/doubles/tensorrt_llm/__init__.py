"""specbuild's TEST DOUBLE of the `tensorrt_llm` wheel (engine path, 0.17-1.2). It is not TensorRT-LLM.

It does the file work of the real thing (TensorRT-LLM checkpoints, engine folders with the real config.json shape)
and enforces the real contract; every rule cites the NVIDIA/TensorRT-LLM source file it follows (as read from the
newest pre-removal engine-path sources; no release tag was pinned). It computes nothing.

Importable only when SPECBUILD_TRTLLM_DOUBLE=1 (set by tests/trtllm/conftest.py), so it can never stand in for
the wheel by accident. Knobs (environment, for tests):
  SPECBUILD_DOUBLE_TRTLLM_VERSION   version string reported (default 1.2.0)
  SPECBUILD_DOUBLE_FAULT            injected fault: convert:oom | convert:segv | build:oom | build:ignore_max_draft_len
  SPECBUILD_DOUBLE_DROP_FLAGS       comma list of trtllm-build flags this "release" lacks, e.g. --kv_cache_type
  SPECBUILD_DOUBLE_BUILD_SECONDS    trtllm-build sleeps this long after writing rank0.engine (interrupt tests)
  SPECBUILD_DOUBLE_PID_FILE         trtllm-build / converter write their pid here when they start
  SPECBUILD_DOUBLE_CALL_LOG         JSON-lines file: every wheel call with its argument types
"""

import os as _os

if _os.environ.get("SPECBUILD_TRTLLM_DOUBLE") != "1":
    raise ImportError(
        "tests/doubles/tensorrt_llm is specbuild's test double of TensorRT-LLM, not TensorRT-LLM; it is "
        "importable only in specbuild's tests (SPECBUILD_TRTLLM_DOUBLE=1)"
    )

__version__ = _os.environ.get("SPECBUILD_DOUBLE_TRTLLM_VERSION", "1.2.0")

from tensorrt_llm.mapping import Mapping  # noqa: E402,F401  (the real package exports Mapping at top level)


def __getattr__(name):  # `from tensorrt_llm import LLM`, as in the real package (imported on first use)
    if name == "LLM":
        from tensorrt_llm.llmapi import LLM

        return LLM
    raise AttributeError(name)
