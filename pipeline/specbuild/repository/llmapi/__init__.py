"""The LLM-API flavour: TensorRT-LLM's PyTorch backend served by one Python model `tensorrt_llm` configured by
`1/model.yaml` (TensorRT-LLM triton_backend/all_models/llmapi/tensorrt_llm/): the model.yaml dialect per release, the
config.pbtxt tensor contract, the repository and its launch script. Shared by both runtimes (only model.py differs)."""
