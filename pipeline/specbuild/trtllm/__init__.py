"""The tensorrt-llm runtime (runtime.py): convert checkpoints, run trtllm-build, read engines back, and check the
machine (doctor). tensorrt_llm itself is only ever imported in child processes."""
