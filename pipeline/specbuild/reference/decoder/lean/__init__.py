"""The lean forward of the reference runtime: plain modules over a checkpoint's weights, no generate machinery.

| file | holds |
|---|---|
| `linear.py` | `Linear`: the checkpoint's weight through MKL (column- or row-major) or a oneDNN-packed copy, per shape and row count as measured on this CPU (or a fixed rule); `Int8Linear` / `drafting_linear`: a drafter's larger matmuls in int8 (fbgemm) |
| `matmul_calibration.py` | which float32 kernel each weight shape runs fastest at each row count: measured at load (interleaved, robust to a busy machine), cached per CPU model, flags, torch and threads |
| `layers.py` | `rms_norm`, `RopeTable` (cos/sin by position), `DecoderLayer` (fused qkv and gate/up, SDPA over the `KVCache`) |
| `llama.py` | `LeanLlama` (embedding, layers, final norm; `capture_layers`), `unsupported(hf_model)` |
| `heads.py` | `LeanEagleHead` (EAGLE-1's fc + decoder layer), `LeanEagle3Head` (EAGLE-3's fc, layer over [norm(embedding); norm(x)], norm + lm_head), `LeanMedusaHeads` (all Medusa heads, first ResBlocks fused) |

`CausalLM` (../model.py) runs `LeanLlama` for Llama-architecture checkpoints and transformers' decoder for any
other; both write the same position-addressed `KVCache` (../kv_cache.py).
"""
