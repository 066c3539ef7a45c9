"""AUTO (TensorRT-LLM's `AUTO` decoding type): TensorRT-LLM picks a draft-model-free method itself (heuristic.py).
Stdlib only."""
