"""A test double of NVIDIA Model-Optimizer 0.47.0 (PyPI nvidia-modelopt), for tests/adapt/test_modelopt_trainer.py:
the three calls specbuild's worker makes (pipeline/specbuild/adapt/modelopt/worker.py), each checking what the real
release accepts, read from its installed sources (nvidia-modelopt 0.47.0):

- modelopt/torch/speculative/utils.py `load_vlm_or_llm(model_name_or_path, use_fake_base=False,
  use_offline_training=False, dtype=None, device_map=None, trust_remote_code=False)`: with use_offline_training the
  target is loaded with num_hidden_layers=0;
- modelopt/torch/speculative/speculative_decoding.py `convert(model, mode)` with mode [("eagle", EagleConfig dict)]:
  only EagleConfig's fields (config.py), the architecture merged over eagle3_default_config (whose head_dim 128 and
  bfloat16 are wrong for any other head: the double keeps them, so a config that does not set them fails to load);
  the eagle module's tensors as plugins/modeling_eagle.py names them (layers.0.*, fc, norm, lm_head, d2t buffer);
  the forward of plugins/hf_eagle.py in offline mode: base_model_outputs required, with its known keys, the shapes
  of hidden states, a bool loss_mask, and the training-time-test masks cached per step at the first batch's length
  (hf_eagle.py `_get_ttt_attention_mask`): every batch of a run must have that length;
- modelopt/torch/export/unified_export_hf.py `export_speculative_decoding(model, dtype=None, export_dir=...)`:
  EagleExporter's files (export/plugins/hf_spec_export.py: config.json from llama_eagle_template_config,
  model.safetensors with LLAMA_EAGLE_SINGLE_LAYER's keys, lm_head and d2t).

Its forward is not Model-Optimizer's network: a small objective over the same tensors (the drafted distribution of
fc + norm + lm_head against the target's next token), enough to train and change the weights. Every call is
appended to $MODELOPT_DOUBLE_LOG as one JSON line, for the test to read."""

import json
import os

__version__ = "0.47.0"


def record(call: str, **fields) -> None:
    path = os.environ.get("MODELOPT_DOUBLE_LOG")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps({"call": call, **fields}) + "\n")
