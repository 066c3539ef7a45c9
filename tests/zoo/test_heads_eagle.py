"""EAGLE-1 head: round trip, cache/tree-mask behaviour, and the layout TensorRT-LLM reads as --eagle_model_dir."""

from __future__ import annotations

import json

import pytest
import torch

from specbuild.errors import UserError
from specbuild.heads.eagle import EagleHeadModule, causal_mask, load_eagle_head, save_eagle_head

# SafeAILab/EAGLE eagle/model/cnets1.py (EAGLE-1 `Model`), loaded with strict=True by ea_model.py:
# embed_tokens, fc (with bias), one LlamaDecoderLayer whose index-0 variant has no input_layernorm.
EAGLE1_KEYS = {
    "embed_tokens.weight",
    "fc.weight",
    "fc.bias",
    "layers.0.self_attn.q_proj.weight",
    "layers.0.self_attn.k_proj.weight",
    "layers.0.self_attn.v_proj.weight",
    "layers.0.self_attn.o_proj.weight",
    "layers.0.mlp.gate_proj.weight",
    "layers.0.mlp.up_proj.weight",
    "layers.0.mlp.down_proj.weight",
    "layers.0.post_attention_layernorm.weight",
}


def _head(tiny_llama):
    torch.manual_seed(1)
    head = EagleHeadModule.for_target(tiny_llama.config)
    head.copy_embedding_from(tiny_llama)
    return head.eval()


def _inputs(t=6, b=2, vocab=300, hidden=64):
    g = torch.Generator().manual_seed(2)
    feats = torch.randn(b, t, hidden, generator=g)
    ids = torch.randint(0, vocab, (b, t), generator=g)
    pos = torch.arange(t)[None].expand(b, t)
    return feats, ids, pos


def test_fc_reads_embedding_first_then_feature(tiny_llama):
    head = _head(tiny_llama)
    feats, ids, pos = _inputs()
    seen = {}
    head.layers[0].register_forward_pre_hook(lambda m, args: seen.setdefault("x", args[0]))
    head(feats, ids, pos)
    expected = torch.cat([tiny_llama.model.embed_tokens(ids), feats], dim=-1) @ head.fc.weight.T + head.fc.bias
    torch.testing.assert_close(seen["x"], expected)


def test_round_trip(tmp_path, tiny_llama):
    head = _head(tiny_llama)
    save_eagle_head(head, tmp_path, dtype=torch.float32)
    loaded = load_eagle_head(tmp_path, tiny_llama)
    feats, ids, pos = _inputs()
    with torch.no_grad():
        torch.testing.assert_close(loaded(feats, ids, pos), head(feats, ids, pos))


def test_cache_matches_full_forward(tiny_llama):
    head = _head(tiny_llama)
    feats, ids, pos = _inputs(t=7)
    with torch.no_grad():
        full = head(feats, ids, pos)
        cache = head.new_cache()
        first = head(feats[:, :4], ids[:, :4], pos[:, :4], past_key_values=cache)
        rest = head(feats[:, 4:], ids[:, 4:], pos[:, 4:], past_key_values=cache)
    assert cache.get_seq_length() == 7
    torch.testing.assert_close(torch.cat([first, rest], dim=1), full, atol=1e-5, rtol=1e-5)


def test_tree_mask_branches_do_not_see_each_other(tiny_llama):
    """Two sibling draft tokens at the same position, with a tree mask, equal two separate 1-token steps."""
    head = _head(tiny_llama)
    feats, ids, pos = _inputs(t=5, b=1)
    with torch.no_grad():
        cache = head.new_cache()
        head(feats[:, :3], ids[:, :3], pos[:, :3], past_key_values=cache)
        mask = torch.zeros(1, 1, 2, 5)
        mask[0, 0, 0, 4] = torch.finfo(torch.float32).min  # sibling 0 does not see sibling 1
        mask[0, 0, 1, 3] = torch.finfo(torch.float32).min  # and vice versa
        sib_pos = torch.tensor([[3, 3]])
        tree = head(feats[:, 3:5], ids[:, 3:5], sib_pos, attention_mask=mask, past_key_values=cache)
        for i in range(2):
            c = head.new_cache()
            head(feats[:, :3], ids[:, :3], pos[:, :3], past_key_values=c)
            one = head(feats[:, 3 + i : 4 + i], ids[:, 3 + i : 4 + i], sib_pos[:, :1], past_key_values=c)
            torch.testing.assert_close(tree[:, i : i + 1], one, atol=1e-5, rtol=1e-5)


def test_bool_mask_is_refused(tiny_llama):
    head = _head(tiny_llama)
    feats, ids, pos = _inputs(t=3, b=1)
    with pytest.raises(TypeError):
        head(feats, ids, pos, attention_mask=torch.ones(1, 1, 3, 3, dtype=torch.bool))


def test_causal_mask_shape_and_values():
    m = causal_mask(2, 3, 2, torch.float32)
    assert m.shape == (2, 1, 3, 5)
    assert (m[0, 0, 0, :3] == 0).all() and (m[0, 0, 0, 3:] < -1e30).all()
    assert (m[0, 0, 2] == 0).all()


def test_layout_matches_eagle1_and_tensorrt_llm(tmp_path, tiny_llama):
    from transformers import LlamaConfig, LlamaForCausalLM

    head = _head(tiny_llama)
    save_eagle_head(head, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json", "pytorch_model.bin"]
    # tensorrt_llm/models/eagle/weight.py::load_eagle_hf: torch.load(<dir>/pytorch_model.bin)["fc.weight"|"fc.bias"]
    state = torch.load(tmp_path / "pytorch_model.bin", weights_only=True)
    assert set(state) == EAGLE1_KEYS
    assert state["fc.weight"].shape == (64, 128) and state["fc.bias"].shape == (64,)
    assert all(t.dtype == torch.float16 for t in state.values())
    torch.testing.assert_close(
        state["embed_tokens.weight"].float(), tiny_llama.model.embed_tokens.weight.half().float()
    )
    # examples/eagle/convert_checkpoint.py: LlamaConfig.from_pretrained(eagle_model_dir) for the eagle net's
    # num_attention_heads / intermediate_size / num_hidden_layers / hidden_size / num_key_value_heads /
    # rms_norm_eps / max_position_embeddings ...
    cfg = LlamaConfig.from_pretrained(tmp_path)
    assert (cfg.num_hidden_layers, cfg.hidden_size, cfg.vocab_size) == (1, 64, 300)
    assert cfg.intermediate_size == 172 and cfg.num_attention_heads == 4 and cfg.num_key_value_heads == 4
    raw = json.loads((tmp_path / "config.json").read_text())
    assert raw["model_type"] == "llama" and raw["torch_dtype"] == "float16"
    # ... and LlamaForCausalLM.from_pretrained(eagle_model_dir), whose model.layers.0.* and model.embed_tokens
    # feed the drafter (convert_hf_llama); input_layernorm, model.norm and lm_head are skipped by load_eagle_hf.
    hf = LlamaForCausalLM.from_pretrained(tmp_path, dtype=torch.float16)
    torch.testing.assert_close(hf.model.layers[0].self_attn.q_proj.weight, state["layers.0.self_attn.q_proj.weight"])
    torch.testing.assert_close(hf.model.layers[0].mlp.down_proj.weight, state["layers.0.mlp.down_proj.weight"])
    torch.testing.assert_close(hf.model.embed_tokens.weight, state["embed_tokens.weight"])


def test_user_errors(tmp_path, tiny_llama):
    with pytest.raises(UserError):
        load_eagle_head(tmp_path / "nope")
    head = _head(tiny_llama)
    save_eagle_head(head, tmp_path)
    (tmp_path / "pytorch_model.bin").unlink()
    with pytest.raises(UserError, match="pytorch_model.bin"):
        load_eagle_head(tmp_path)
    save_eagle_head(head, tmp_path)
    cfg = json.loads((tmp_path / "config.json").read_text())
    cfg["hidden_size"] = 32
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(UserError, match="hidden_size"):
        load_eagle_head(tmp_path, tiny_llama)
