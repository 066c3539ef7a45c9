"""The LLM-API flavour: TensorRT-LLM's PyTorch backend served by one Python model `tensorrt_llm` configured by
`1/model.yaml` (llmapi fact sheet): the model.yaml dialect per release, the config.pbtxt tensor contract, the
repository and its launch script. Shared by both runtimes (only model.py differs)."""
