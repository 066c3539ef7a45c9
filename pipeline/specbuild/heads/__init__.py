"""Speculative-decoding draft heads in their real on-disk layouts.

- `specbuild.heads.medusa`: Medusa heads (FasterDecoding layout, read by TensorRT-LLM's
  `examples/medusa/convert_checkpoint.py --medusa_model_dir`).
- `specbuild.heads.eagle`: the EAGLE-1 draft head (SafeAILab/EAGLE layout, read by TensorRT-LLM's
  `examples/eagle/convert_checkpoint.py --eagle_model_dir`).

Both modules import torch at module load; this package's `__init__` does not.
"""
