"""Double of tensorrt_llm.llmapi: `LLM(**args)` validates its arguments as the real one does for the release the
double reports (SPECBUILD_DOUBLE_TRTLLM_VERSION): through the release's TorchLlmArgs (a dict speculative_config
through the release's parse path), and refuses to generate."""

from __future__ import annotations

import tensorrt_llm
from tensorrt_llm.llmapi import llm_args


def release() -> str:
    """The release line of the reported version (llm_args.line: 1.0, 1.1, 1.2, 1.3.0rc3 or 1.3)."""
    return llm_args.line(tensorrt_llm.__version__)


class LLM:
    def __init__(self, **args):
        self.args = llm_args.TorchLlmArgs.from_kwargs(**args).kwargs

    def generate_async(self, *_a, **_k):
        raise RuntimeError("specbuild's TensorRT-LLM test double does not generate")

    def shutdown(self):
        pass
