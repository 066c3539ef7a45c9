"""Medusa heads: round trip and the on-disk layout TensorRT-LLM reads as --medusa_model_dir."""

from __future__ import annotations

import json

import pytest
import torch

from specbuild.errors import UserError
from specbuild.heads.medusa import MedusaHeadsModule, load_medusa_heads, save_medusa_heads


def test_forward_shape_and_resblock_math():
    torch.manual_seed(0)
    heads = MedusaHeadsModule(hidden_size=16, vocab_size=40, num_heads=3, num_layers=2)
    x = torch.randn(2, 5, 16)
    logits = heads(x)
    assert logits.shape == (3, 2, 5, 40)
    # head 1 computed by hand: two ResBlocks x + silu(W x + b), then the bias-free projection
    h = x
    for block in list(heads.heads[1])[:2]:
        h = h + torch.nn.functional.silu(h @ block.linear.weight.T + block.linear.bias)
    torch.testing.assert_close(logits[1], h @ heads.heads[1][2].weight.T)


def test_init_from_lm_head_reproduces_target_logits():
    lm = torch.randn(40, 16)
    heads = MedusaHeadsModule(16, 40, num_heads=2, num_layers=1)
    heads.init_from_lm_head(lm)
    x = torch.randn(1, 3, 16)
    for k in range(2):
        torch.testing.assert_close(heads(x)[k], x @ lm.T)


def test_round_trip(tmp_path):
    torch.manual_seed(0)
    heads = MedusaHeadsModule(16, 40, num_heads=4, num_layers=1)
    save_medusa_heads(heads, tmp_path, dtype=torch.float32, base_model_name_or_path="../target")
    loaded = load_medusa_heads(tmp_path)
    x = torch.randn(2, 3, 16)
    torch.testing.assert_close(loaded(x), heads(x))


def test_layout_matches_tensorrt_llm_loader(tmp_path):
    from safetensors.torch import load_file

    heads = MedusaHeadsModule(16, 40, num_heads=3, num_layers=1)
    save_medusa_heads(heads, tmp_path)
    # examples/medusa/convert_checkpoint.py (TensorRT-LLM) reads these two keys from config.json.
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["medusa_num_heads"] == 3 and config["medusa_num_layers"] == 1
    # tensorrt_llm/models/medusa/weight.py::load_medusa_hf opens medusa_lm_head.pt, else
    # medusa_lm_head.safetensors, and reads f"{h}.{l}.linear.weight", f"{h}.{l}.linear.bias",
    # f"{h}.{num_medusa_layers}.weight" (the head's lm_head, [vocab, hidden]).
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json", "medusa_lm_head.safetensors"]
    tensors = load_file(str(tmp_path / "medusa_lm_head.safetensors"))
    expected = set()
    for h in range(3):
        expected |= {f"{h}.0.linear.weight", f"{h}.0.linear.bias", f"{h}.1.weight"}
    assert set(tensors) == expected
    assert tensors["2.1.weight"].shape == (40, 16)
    assert tensors["0.0.linear.weight"].shape == (16, 16)
    assert tensors["0.0.linear.bias"].shape == (16,)
    assert all(t.dtype == torch.float16 for t in tensors.values())


def test_loader_reads_the_older_pt_file(tmp_path):
    heads = MedusaHeadsModule(8, 20, num_heads=2, num_layers=1)
    save_medusa_heads(heads, tmp_path, dtype=torch.float32)
    (tmp_path / "medusa_lm_head.safetensors").unlink()
    torch.save(heads.checkpoint_state_dict(), tmp_path / "medusa_lm_head.pt")
    x = torch.randn(1, 2, 8)
    torch.testing.assert_close(load_medusa_heads(tmp_path)(x), heads(x))


def test_user_errors(tmp_path):
    with pytest.raises(UserError, match="config.json"):
        load_medusa_heads(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"medusa_num_heads": 2}))
    with pytest.raises(UserError, match="medusa_num_layers"):
        load_medusa_heads(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"medusa_num_heads": 2, "medusa_num_layers": 1}))
    with pytest.raises(UserError, match="medusa_lm_head"):
        load_medusa_heads(tmp_path)
