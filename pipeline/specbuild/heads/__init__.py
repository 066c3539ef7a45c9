"""Speculative-decoding draft heads in their real on-disk layouts.

- `specbuild.heads.medusa`: Medusa heads (FasterDecoding layout, read by TensorRT-LLM's
  `examples/medusa/convert_checkpoint.py --medusa_model_dir`).
- `specbuild.heads.eagle`: the EAGLE-1 draft head (SafeAILab/EAGLE layout, read by TensorRT-LLM's
  `examples/eagle/convert_checkpoint.py --eagle_model_dir`).
- `specbuild.heads.eagle3`: the EAGLE-3 draft head (SafeAILab/EAGLE `traineagle3` / ModelOpt layout, read by TensorRT-LLM's
  PyTorch backend as `speculative_config.speculative_model` with `decoding_type: Eagle3`).

These modules import torch at module load; this package's `__init__` does not.
"""
