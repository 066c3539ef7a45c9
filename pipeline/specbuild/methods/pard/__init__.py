"""PARD (parallel draft, arXiv 2504.18583; TensorRT-LLM's `PARD` decoding type): what a PARD draft checkpoint must
be (checkpoint.py). Stdlib only."""
