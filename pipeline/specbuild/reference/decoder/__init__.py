"""The reference runtime's decoder: what a TensorRT-LLM engine does at decode time, written to be read (the
in-flight batching executor, KV cache and batch, the speculative methods, the lean forward, token trees,
acceptance and sampling). The runtime plugin around it (specbuild/reference/: engine folders, dialect, checks,
the llm-api rehearsal, the Triton core models) builds and loads what it decodes. Nothing heavy is imported here."""
