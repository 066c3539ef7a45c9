"""specbuild's CPU reference runtime (PyTorch): engine folders, an in-flight batching executor and one module
per speculative method. Nothing heavy is imported here; see README.md in this folder."""
