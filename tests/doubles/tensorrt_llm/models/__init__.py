"""Double of tensorrt_llm.models: the model classes specbuild converts with, and MODEL_MAP."""

from tensorrt_llm.models.eagle import EagleForCausalLM
from tensorrt_llm.models.llama import LLaMAForCausalLM, QWenForCausalLM
from tensorrt_llm.models.medusa import MedusaForCausalLm
from tensorrt_llm.models.modeling_utils import PretrainedModel, QuantConfig, SpeculativeDecodingMode  # noqa: F401

# tensorrt_llm/models/__init__.py MODEL_MAP: checkpoint architecture -> class. trtllm-build
# asserts the checkpoint's architecture is a key ("Unsupported model architecture", commands/build.py).
MODEL_MAP = {
    "LlamaForCausalLM": LLaMAForCausalLM,
    "MistralForCausalLM": LLaMAForCausalLM,
    "MixtralForCausalLM": LLaMAForCausalLM,
    "Qwen2ForCausalLM": QWenForCausalLM,
    "Qwen3ForCausalLM": QWenForCausalLM,
    "QWenForCausalLM": QWenForCausalLM,
    "MedusaForCausalLM": MedusaForCausalLm,
    "MedusaLlamaForCausalLM": MedusaForCausalLm,
    "EagleForCausalLM": EagleForCausalLM,
}
