"""Double of tensorrt_llm.llmapi.llm_utils: NVIDIA's llmapi model imports update_llm_args_with_extra_dict from here
(triton_backend/all_models/llmapi/tensorrt_llm/1/model.py, 1.0 and later); it is defined in llm_args.py."""

from tensorrt_llm.llmapi.llm_args import update_llm_args_with_extra_dict  # noqa: F401
