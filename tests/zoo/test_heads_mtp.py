"""MTP layers in DeepSeek-V3's on-disk layout (specbuild.heads.mtp): the tensor names and shapes written, a saved
target read back exactly (its main model by transformers, its MTP layer by the loader), the layer's forward as
TensorRT-LLM's DeepseekV3MTP computes it, and the loader's errors on incomplete or unsupported checkpoints."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from specbuild.errors import UserError
from specbuild.heads.mtp import is_moe_layer, load_mtp_layers
from specbuild.zoo import mtp_target
from specbuild.zoo.profiles import LlamaShape, MtpTargetSettings, Schedule

SETTINGS = MtpTargetSettings(
    shape=LlamaShape(hidden=32, layers=2, heads=2, intermediate=64),
    kv_lora_rank=16,
    qk_nope_head_dim=8,
    qk_rope_head_dim=8,
    v_head_dim=8,
    mtp_layers=1,
    mtp_weight=0.3,
    train=Schedule(steps=0, batch=1, lr=1e-3),
)
# DeepSeek-V3's MTP module besides its decoder layer (README_WEIGHTS.md: embed_tokens, enorm, hnorm, eh_proj,
# shared_head.norm, shared_head.head), and the decoder layer of this config (q_lora_rank None: q_proj; dense MLP)
MTP_OWN = {"embed_tokens.weight", "enorm.weight", "hnorm.weight", "eh_proj.weight", "shared_head.norm.weight"}
MTP_OWN |= {"shared_head.head.weight"}
LAYER = {
    "input_layernorm.weight",
    "post_attention_layernorm.weight",
    "self_attn.q_proj.weight",
    "self_attn.kv_a_proj_with_mqa.weight",
    "self_attn.kv_a_layernorm.weight",
    "self_attn.kv_b_proj.weight",
    "self_attn.o_proj.weight",
    "mlp.gate_proj.weight",
    "mlp.up_proj.weight",
    "mlp.down_proj.weight",
}


def _saved(folder: Path, seed: int = 0):
    profile = SimpleNamespace(vocab_size=40, max_position_embeddings=128)
    tokenizer = SimpleNamespace(bos_token_id=1, eos_token_id=2, pad_token_id=2)
    model, layers = mtp_target.new_mtp_target(SETTINGS, profile, tokenizer, seed)
    mtp_target.save_mtp_target(
        model, layers, tokenizer, folder, torch.float32, lambda m, _t, f, _d: m.save_pretrained(str(f))
    )
    return model.eval(), layers[0].eval()


def test_layout_is_deepseek_v3s(tmp_path):
    model, layer = _saved(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["architectures"] == ["DeepseekV3ForCausalLM"] and config["num_nextn_predict_layers"] == 1
    # every layer dense by TensorRT-LLM's rule, the MTP layer (index 2) included
    assert config["first_k_dense_replace"] == 3 and config["moe_layer_freq"] == 1
    assert not any(is_moe_layer(model.config, i) for i in range(3))
    with safe_open(str(tmp_path / "model.safetensors"), "pt") as f:
        names = set(f.keys())
        mtp = {n.removeprefix("model.layers.2.") for n in names if n.startswith("model.layers.2.")}
        assert mtp == MTP_OWN | LAYER
        assert f.get_slice("model.layers.2.eh_proj.weight").get_shape() == [32, 64]
        torch.testing.assert_close(
            f.get_tensor("model.layers.2.shared_head.head.weight"), f.get_tensor("lm_head.weight")
        )
        torch.testing.assert_close(
            f.get_tensor("model.layers.2.embed_tokens.weight"), f.get_tensor("model.embed_tokens.weight")
        )
    assert not any(n.startswith("model.layers.3.") for n in names)


def test_saved_target_reads_back(tmp_path):
    model, layer = _saved(tmp_path, seed=3)
    from transformers import AutoModelForCausalLM

    loaded = AutoModelForCausalLM.from_pretrained(str(tmp_path)).eval()
    (read,) = load_mtp_layers(tmp_path, loaded)
    assert read.index == 2 and read.config.num_hidden_layers == 1
    for name, tensor in layer.state_dict().items():
        torch.testing.assert_close(read.state_dict()[name], tensor)
    # the forward is TensorRT-LLM's DeepseekV3MTP: eh_proj(cat(enorm(embed), hnorm(h))), the layer, shared_head.norm
    x = torch.tensor([[1, 5, 9, 3]])
    with torch.no_grad():
        h = loaded.model(input_ids=x).last_hidden_state
        pos = torch.arange(3)[None]
        embeds = loaded.get_input_embeddings()(x[:, 1:])
        out = read(h[:, :3], embeds, loaded.model.rotary_emb(h, pos), None, pos)
        fused = read.eh_proj(torch.cat([read.enorm(embeds), read.hnorm(h[:, :3])], dim=-1))
        block = read.block(fused, position_embeddings=loaded.model.rotary_emb(h, pos), position_ids=pos)
    torch.testing.assert_close(out, read.shared_head.norm(block))


def test_loader_names_what_is_wrong(tmp_path):
    model, _ = _saved(tmp_path)
    weights = tmp_path / "model.safetensors"
    tensors = load_file(str(weights))
    save_file({k: v for k, v in tensors.items() if k != "model.layers.2.eh_proj.weight"}, str(weights))
    with pytest.raises(UserError, match=r"MTP layer 2 lacks 1 tensor\(s\) \(model.layers.2.eh_proj.weight\)"):
        load_mtp_layers(tmp_path, model)
    save_file({**tensors, "model.layers.2.mlp.gate.weight": torch.zeros(4, 32)}, str(weights))
    with pytest.raises(UserError, match="model.layers.2.mlp.gate.weight"):
        load_mtp_layers(tmp_path, model)
    save_file(tensors, str(weights))
    model.config.first_k_dense_replace = 2  # DeepSeek-V3's own MTP layer is MoE
    with pytest.raises(UserError, match="MTP layer 2 is MoE"):
        load_mtp_layers(tmp_path, model)
    model.config.num_nextn_predict_layers = 0
    with pytest.raises(UserError, match="no MTP layers"):
        load_mtp_layers(tmp_path, model)
