"""Double of tensorrt_llm.llmapi: `LLM(**args)` validates its arguments as the real TorchLlmArgs would for the
release the double reports (SPECBUILD_DOUBLE_TRTLLM_VERSION) and refuses to generate."""

from __future__ import annotations

import tensorrt_llm
from tensorrt_llm.llmapi import llm_args


def release() -> str:
    major, minor = tensorrt_llm.__version__.split(".")[:2]
    return f"{major}.{minor}"


class LLM:
    def __init__(self, **args):
        problems = llm_args.validate(args, release())
        if problems:
            raise ValueError(f"{len(problems)} validation error(s) for TorchLlmArgs (TensorRT-LLM "
                             f"{tensorrt_llm.__version__} test double): " + "; ".join(problems))
        self.args = args

    def generate_async(self, *_a, **_k):
        raise RuntimeError("specbuild's TensorRT-LLM test double does not generate")

    def shutdown(self):
        pass
