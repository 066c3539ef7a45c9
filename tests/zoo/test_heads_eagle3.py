"""EAGLE-3 head: the on-disk layout TensorRT-LLM loads (config keys, tensor names, shapes, dtypes), its forward
semantics, the loader's checks, the training-time test equal to cached drafting, and the shipped checkpoints/tiny head."""

from __future__ import annotations

import json

import pytest
import torch

from specbuild.errors import UserError
from specbuild.heads.eagle3 import (
    Eagle3HeadModule,
    draft_vocabulary,
    load_eagle3_head,
    new_eagle3_head,
    save_eagle3_head,
    trtllm_default_layers,
)
from specbuild.zoo import COMMITTED

SHIPPED = COMMITTED["tiny"] / "eagle3"

# The single-layer EAGLE-3 checkpoint as SafeAILab/EAGLE's trainer saves it and TensorRT-LLM's
# `Eagle3ForCausalLM.load_weights` reads it (ModelOpt's `LLAMA_EAGLE_SINGLE_LAYER`: 12 required + d2t/lm_head; t2d
# is the trainer's mask). No embed_tokens: hidden_size equals the target's, so the target's embedding is shared.
EAGLE3_KEYS = {
    "fc.weight",
    "midlayer.input_layernorm.weight",
    "midlayer.hidden_norm.weight",
    "midlayer.self_attn.q_proj.weight",
    "midlayer.self_attn.k_proj.weight",
    "midlayer.self_attn.v_proj.weight",
    "midlayer.self_attn.o_proj.weight",
    "midlayer.post_attention_layernorm.weight",
    "midlayer.mlp.gate_proj.weight",
    "midlayer.mlp.up_proj.weight",
    "midlayer.mlp.down_proj.weight",
    "norm.weight",
    "lm_head.weight",
    "d2t",
    "t2d",
}
VOCAB, HIDDEN, DRAFT_VOCAB, LAYERS = 300, 64, 120, (1, 3, 4)


@pytest.fixture(scope="module")
def target():
    """A random 8-layer Llama (hidden 64, 4 heads, 2 KV heads): TensorRT-LLM's default capture is {1, 3, 4}."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        hidden_size=HIDDEN,
        intermediate_size=96,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_hidden_layers=8,
        vocab_size=VOCAB,
        max_position_embeddings=128,
    )
    return LlamaForCausalLM(config).eval()


def _head(target, layers=LAYERS, draft_vocab=DRAFT_VOCAB, seed=1) -> Eagle3HeadModule:
    torch.manual_seed(seed)
    head = new_eagle3_head(target.config, layers=layers, draft_vocab_size=draft_vocab)
    counts = torch.randint(0, 50, (VOCAB,), generator=torch.Generator().manual_seed(seed))
    head.set_vocabulary(*draft_vocabulary(counts, draft_vocab))
    with torch.no_grad():
        for p in head.parameters():
            p.add_(0.05 * torch.randn_like(p))  # norms away from exactly 1
    return head.eval()


def _inputs(t=6, b=2, width=3 * HIDDEN):
    g = torch.Generator().manual_seed(2)
    return (
        torch.randn(b, t, width, generator=g),
        torch.randn(b, t, HIDDEN, generator=g),
        torch.arange(t)[None].expand(b, t),
    )


def test_default_capture_layers_follow_tensorrt_llm():
    assert trtllm_default_layers(32) == (1, 15, 28)
    assert trtllm_default_layers(16) == (1, 7, 12)
    assert trtllm_default_layers(8) == LAYERS
    assert trtllm_default_layers(1) == (0,)
    assert trtllm_default_layers(4) is None and trtllm_default_layers(5) is None  # "Not enough hidden layers"


def test_draft_vocabulary_is_the_most_frequent_tokens_sorted_by_id():
    counts = torch.tensor([5, 0, 9, 9, 1, 7, 3, 9])
    d2t, t2d = draft_vocabulary(counts, 4)
    ids = torch.arange(4) + d2t
    assert ids.tolist() == [2, 3, 5, 7]  # 9, 9, 9 and 7; the lower ids win no tie here, sorted by id
    assert d2t.dtype == torch.int64 and t2d.tolist() == [False, False, True, True, False, True, False, True]
    d2t, _ = draft_vocabulary(torch.tensor([1, 1, 1, 1]), 2)  # ties go to the lower ids
    assert (torch.arange(2) + d2t).tolist() == [0, 1]


def test_layout_matches_tensorrt_llm(tmp_path, target):
    from safetensors import safe_open
    from transformers import AutoConfig, LlamaConfig

    head = _head(target)
    save_eagle3_head(head, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json", "model.safetensors"]
    with safe_open(str(tmp_path / "model.safetensors"), "pt") as f:
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    assert set(tensors) == EAGLE3_KEYS
    head_dim = HIDDEN // 4
    shapes = {
        "fc.weight": (HIDDEN, 3 * HIDDEN),  # n = 3 captured layers of the target's width
        "midlayer.self_attn.q_proj.weight": (4 * head_dim, 2 * HIDDEN),  # input = [embedding ; hidden]
        "midlayer.self_attn.k_proj.weight": (2 * head_dim, 2 * HIDDEN),
        "midlayer.self_attn.v_proj.weight": (2 * head_dim, 2 * HIDDEN),
        "midlayer.self_attn.o_proj.weight": (HIDDEN, 4 * head_dim),
        "midlayer.mlp.gate_proj.weight": (96, HIDDEN),
        "midlayer.mlp.up_proj.weight": (96, HIDDEN),
        "midlayer.mlp.down_proj.weight": (HIDDEN, 96),
        "midlayer.input_layernorm.weight": (HIDDEN,),
        "midlayer.hidden_norm.weight": (HIDDEN,),
        "midlayer.post_attention_layernorm.weight": (HIDDEN,),
        "norm.weight": (HIDDEN,),
        "lm_head.weight": (DRAFT_VOCAB, HIDDEN),
        "d2t": (DRAFT_VOCAB,),
        "t2d": (VOCAB,),
    }
    assert {k: tuple(v.shape) for k, v in tensors.items()} == shapes
    assert tensors["d2t"].dtype == torch.int64 and tensors["t2d"].dtype == torch.bool
    assert all(v.dtype == torch.float16 for k, v in tensors.items() if k not in ("d2t", "t2d"))
    ids = torch.arange(DRAFT_VOCAB) + tensors["d2t"]
    assert (ids.diff() > 0).all() and tensors["t2d"].nonzero().flatten().tolist() == ids.tolist()

    config = json.loads((tmp_path / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLMEagle3"] and config["model_type"] == "llama"
    expected = {
        "num_hidden_layers": 1,
        "hidden_size": HIDDEN,
        "intermediate_size": 96,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "vocab_size": VOCAB,
        "draft_vocab_size": DRAFT_VOCAB,
        "bias": False,
        "torch_dtype": "float16",
        "rope_theta": 10000.0,
        "rms_norm_eps": target.config.rms_norm_eps,
        "max_position_embeddings": 128,
        "tie_word_embeddings": False,
    }
    assert {k: config[k] for k in expected} == expected
    assert "target_hidden_size" not in config  # same width: TensorRT-LLM shares the target's embedding
    assert config["eagle_config"] == {"eagle_aux_hidden_state_layer_ids": list(LAYERS)}
    # TensorRT-LLM reads the folder with ModelConfig.from_pretrained -> transformers AutoConfig
    auto = AutoConfig.from_pretrained(tmp_path)
    assert isinstance(auto, LlamaConfig) and auto.draft_vocab_size == DRAFT_VOCAB and auto.num_hidden_layers == 1


def test_round_trip_and_legacy_bin(tmp_path, target):
    head = _head(target)
    save_eagle3_head(head, tmp_path / "st", dtype=torch.float32)
    loaded = load_eagle3_head(tmp_path / "st", target)
    x, e, pos = _inputs()
    with torch.no_grad():
        torch.testing.assert_close(loaded(x, e, pos), head(x, e, pos))
    # EAGLE's DeepSpeed export: the same keys in pytorch_model.bin
    legacy = tmp_path / "bin"
    legacy.mkdir()
    (legacy / "config.json").write_text((tmp_path / "st" / "config.json").read_text())
    torch.save(head.state_dict(), legacy / "pytorch_model.bin")
    with torch.no_grad():
        torch.testing.assert_close(load_eagle3_head(legacy, target)(x, e, pos), head(x, e, pos))


def test_forward_reads_normed_embedding_first_then_fused_hidden(target):
    head = _head(target)
    x, e, pos = _inputs()
    seen = {}
    head.midlayer.self_attn.q_proj.register_forward_pre_hook(lambda m, args: seen.setdefault("a", args[0]))
    with torch.no_grad():
        out = head(x, e, pos)
    hidden = x @ head.fc.weight.T

    def rms(v, w):
        return w * v / torch.sqrt(v.pow(2).mean(-1, keepdim=True) + target.config.rms_norm_eps)

    expected = torch.cat(
        [rms(e, head.midlayer.input_layernorm.weight), rms(hidden, head.midlayer.hidden_norm.weight)], -1
    )
    torch.testing.assert_close(seen["a"], expected)
    # a width-H input is the head's own output: fc is skipped (TensorRT-LLM apply_eagle3_fc)
    with torch.no_grad():
        torch.testing.assert_close(head(hidden, e, pos), out)
        logits = head.logits(out)
    torch.testing.assert_close(logits, rms(out, head.norm.weight) @ head.lm_head.weight.T)
    assert logits.shape[-1] == DRAFT_VOCAB


def test_rope_is_neox_style_as_transformers_llama(target):
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

    from specbuild.heads.eagle3 import rope

    q = torch.randn(2, 4, 5, 16)
    pos = torch.tensor([[0, 1, 2, 7, 9], [3, 3, 4, 5, 6]])
    cos, sin = LlamaRotaryEmbedding(config=new_eagle3_head(target.config, layers=LAYERS, draft_vocab_size=10).config)(
        q, pos
    )
    expected, _ = apply_rotary_pos_emb(q, q, cos, sin)
    torch.testing.assert_close(rope(q, pos, 10000.0), expected, atol=1e-5, rtol=1e-5)


def test_cache_and_tree_mask(target):
    head = _head(target)
    x, e, pos = _inputs(t=7)
    with torch.no_grad():
        full = head(x, e, pos)
        cache = head.new_cache()
        first = head(x[:, :4], e[:, :4], pos[:, :4], cache=cache)
        rest = head(x[:, 4:], e[:, 4:], pos[:, 4:], cache=cache)
        torch.testing.assert_close(torch.cat([first, rest], dim=1), full, atol=1e-5, rtol=1e-5)
        # two siblings at one position under a tree mask = two separate one-token passes
        cache = head.new_cache()
        head(x[:1, :3], e[:1, :3], pos[:1, :3], cache=cache)
        mask = torch.zeros(1, 1, 2, 5)
        mask[0, 0, 0, 4] = mask[0, 0, 1, 3] = torch.finfo(torch.float32).min
        siblings = head(full[:1, 2:4], e[:1, 3:5], torch.tensor([[3, 3]]), attention_mask=mask, cache=cache)
        for i in range(2):
            c = head.new_cache()
            head(x[:1, :3], e[:1, :3], pos[:1, :3], cache=c)
            one = head(full[:1, 2 + i : 3 + i], e[:1, 3 + i : 4 + i], torch.tensor([[3]]), cache=c)
            torch.testing.assert_close(siblings[:, i : i + 1], one, atol=1e-5, rtol=1e-5)
    with pytest.raises(TypeError):
        head(x, e, pos, attention_mask=torch.ones(2, 1, 7, 7, dtype=torch.bool))


def test_training_time_test_equals_cached_drafting(target):
    """The trainer's unrolled step k at entry t (causal over real entries, then the chain's own entries) gives the same
    logits as drafting at inference: real entries 0..t through the cache, then k one-token passes fed the previous
    pass's output and the following tokens at positions t+1..t+k."""
    from specbuild.zoo.distill_eagle3 import unrolled_logits

    head = _head(target)
    g = torch.Generator().manual_seed(4)
    tokens = torch.randint(0, VOCAB, (2, 10), generator=g)
    captured = torch.randn(2, 10, 3 * HIDDEN, generator=g)
    embed = target.get_input_embeddings().weight.detach()
    steps = 3
    with torch.no_grad():
        unrolled = unrolled_logits(head, captured, embed, tokens, steps)
        for t in (0, 3, 6):
            cache = head.new_cache()
            out = head(
                captured[:, : t + 1], embed[tokens[:, 1 : t + 2]], torch.arange(t + 1)[None].expand(2, -1), cache=cache
            )[:, -1:]
            torch.testing.assert_close(head.logits(out[:, 0]), unrolled[0][:, t], atol=1e-4, rtol=1e-4)
            for k in range(1, steps):
                out = head(out, embed[tokens[:, t + 1 + k : t + 2 + k]], torch.full((2, 1), t + k), cache=cache)
                torch.testing.assert_close(head.logits(out[:, 0]), unrolled[k][:, t], atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize(
    "problem, match",
    [
        ("missing", "missing \\['midlayer.hidden_norm.weight'\\]"),
        ("shape", "wrong shape"),
        ("no_d2t", "no 'd2t' tensor"),
        ("bad_d2t", "d2t maps draft ids outside"),
        ("two_layers", "num_hidden_layers=2"),
        ("layer_count", "lists 2 layers but fc.weight fuses 3"),
        ("post_norm", "return_hidden_post_norm"),
    ],
)
def test_loader_errors_name_the_file(tmp_path, target, problem, match):
    from safetensors.torch import load_file, save_file

    head = _head(target)
    save_eagle3_head(head, tmp_path)
    weights, config_path = tmp_path / "model.safetensors", tmp_path / "config.json"
    state, config = load_file(str(weights)), json.loads(config_path.read_text())
    if problem == "missing":
        del state["midlayer.hidden_norm.weight"]
    elif problem == "shape":
        state["lm_head.weight"] = state["lm_head.weight"][:-1]
    elif problem == "no_d2t":
        del state["d2t"]
    elif problem == "bad_d2t":
        state["d2t"] = state["d2t"] + VOCAB
    elif problem == "two_layers":
        config["num_hidden_layers"] = 2
    elif problem == "layer_count":
        config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [1, 3]
    elif problem == "post_norm":
        config["eagle_config"]["return_hidden_post_norm"] = True
    save_file(state, str(weights))
    config_path.write_text(json.dumps(config))
    with pytest.raises(UserError, match=match) as info:
        load_eagle3_head(tmp_path, target)
    assert str(tmp_path) in str(info.value)


def test_loader_checks_the_target(tmp_path, target):
    from transformers import LlamaConfig, LlamaForCausalLM

    save_eagle3_head(_head(target), tmp_path)
    other = LlamaForCausalLM(
        LlamaConfig(hidden_size=32, intermediate_size=64, num_attention_heads=4, num_hidden_layers=2, vocab_size=VOCAB)
    )
    with pytest.raises(UserError, match="hidden_size=64 does not match the target's hidden_size=32"):
        load_eagle3_head(tmp_path, other)
    empty = tmp_path / "config_only"
    empty.mkdir()
    (empty / "config.json").write_text((tmp_path / "config.json").read_text())
    with pytest.raises(UserError, match="no model.safetensors"):
        load_eagle3_head(empty, target)


# ---------------------------------------------------------------- the shipped head


@pytest.mark.skipif(not SHIPPED.is_dir(), reason="checkpoints/tiny/eagle3 is not in this checkout")
def test_shipped_head_layout():
    from safetensors import safe_open

    config = json.loads((SHIPPED / "config.json").read_text())
    target_config = json.loads((SHIPPED.parent / "target" / "config.json").read_text())
    assert sorted(p.name for p in SHIPPED.iterdir()) == ["config.json", "model.safetensors"]
    assert config["architectures"] == ["LlamaForCausalLMEagle3"] and config["num_hidden_layers"] == 1
    for key in ("hidden_size", "vocab_size", "num_attention_heads", "rms_norm_eps", "rope_theta"):
        assert config[key] == target_config[key], key
    assert config["draft_vocab_size"] == target_config["vocab_size"] // 2  # its own, smaller vocabulary
    layers = config["eagle_config"]["eagle_aux_hidden_state_layer_ids"]
    assert layers == [0, 1, 3] and max(layers) < target_config["num_hidden_layers"]
    with safe_open(str(SHIPPED / "model.safetensors"), "pt") as f:
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    assert set(tensors) == EAGLE3_KEYS
    h = config["hidden_size"]
    assert tensors["fc.weight"].shape == (h, 3 * h) and tensors["lm_head.weight"].shape == (
        config["draft_vocab_size"],
        h,
    )
    ids = torch.arange(config["draft_vocab_size"]) + tensors["d2t"]
    assert bool((ids.diff() > 0).all()) and 0 <= int(ids.min()) and int(ids.max()) < config["vocab_size"]
    assert (ids != torch.arange(config["draft_vocab_size"])).any()  # d2t is a real mapping
    assert tensors["t2d"].nonzero().flatten().tolist() == ids.tolist()
