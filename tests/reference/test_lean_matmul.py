"""The lean forward's float32 matmul plans (lean/linear.py): the fixed rules `column-major` (weights stored
transposed, relaid in place so the transformers modules share the one copy) and `packed` (plus oneDNN-packed copies
of the larger matrices for calls of several rows, down-projections row-major), and `measured` plans that mix
layouts and kernels per shape and row count (a fake calibration here), give logits equal to an independently
loaded transformers model's, for one row and several, greedy tokens identical; the default rule a measurement must
beat follows the CPU vendor; the environment variable picks a fixed rule, and a bad value is a UserError naming
the variable."""

from __future__ import annotations

import random

import pytest
import torch

from specbuild.errors import UserError
from specbuild.reference.decoder.lean import linear
from specbuild.reference.decoder.lean import matmul_calibration as mc
from specbuild.reference.decoder.model import CausalLM

TOL = 1e-5


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    from transformers import LlamaConfig, LlamaForCausalLM

    root = tmp_path_factory.mktemp("matmul")
    out = {}
    for name, tied in (("untied", False), ("tied", True)):
        torch.manual_seed(5)
        cfg = LlamaConfig(
            vocab_size=1200,
            hidden_size=128,
            intermediate_size=688,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            initializer_range=0.2,
            tie_word_embeddings=tied,
            bos_token_id=None,
            eos_token_id=None,
            pad_token_id=None,
        )
        LlamaForCausalLM(cfg).save_pretrained(root / name)
        out[name] = root / name
    return out


MIXED = "measured-mixed"  # the measured rule over a fake calibration whose plans mix every kernel (below)


def _mixed_times(shape):
    """Fake measured times: row-major fastest for one and two rows where out > in (column-major elsewhere), packed
    for 3-5 and 16+ rows on every matrix: each shape gets a plan with both a dense layout and packed bands."""
    out_features, in_features = shape
    dense_first = (100.0, 50.0) if out_features > in_features else (50.0, 100.0)
    return {
        r: {
            mc.COLUMN_MAJOR: dense_first[0] if r <= 2 else 100.0,
            mc.ROW_MAJOR: dense_first[1] if r <= 2 else 100.0,
            mc.PACKED: 40.0 if 3 <= r <= 5 or r >= 16 else 200.0,
        }
        for r in mc.ROWS
    }


@pytest.fixture
def kernel(monkeypatch):
    """Set SPECBUILD_REFERENCE_MATMUL (or clear it) for one test; the process-wide choice is recomputed. MIXED: the
    default (measured) rule over a fake calibration (_mixed_times) kept in this process."""

    def choose(value: str | None):
        monkeypatch.delenv("SPECBUILD_REFERENCE_FORWARD", raising=False)
        if value is None or value == MIXED:
            monkeypatch.delenv(linear.MATMUL_ENV, raising=False)
        else:
            monkeypatch.setenv(linear.MATMUL_ENV, value)
        if value == MIXED:
            fake = mc.Calibration(None, {}, _mixed_times)
            monkeypatch.setattr(mc, "calibration", lambda: fake)
        linear.matmul_rule.cache_clear()

    yield choose
    linear.matmul_rule.cache_clear()


def _reference_logits(folder, texts):
    """A plain transformers model of its own (row-major weights, nothing shared with the lean model)."""
    from transformers import LlamaForCausalLM

    model = LlamaForCausalLM.from_pretrained(folder).eval()
    with torch.no_grad():
        return [model(torch.tensor([t])).logits[0] for t in texts]


@pytest.mark.parametrize("layout", [linear.COLUMN_MAJOR, linear.PACKED, MIXED])
@pytest.mark.parametrize("name", ["untied", "tied"])
def test_each_layout_gives_transformers_logits(checkpoints, kernel, layout, name):
    kernel(layout)
    lm = CausalLM.from_pretrained(checkpoints[name])
    assert lm.implementation == "lean"
    rng = random.Random(len(name))
    texts = [[rng.randrange(lm.vocab_size) for _ in range(n)] for n in (7, 19)]
    cache = lm.new_cache(2)
    # prefill the first tokens, then a chain of several rows per call (the verification shape), then one token
    # of one row per call (a decode step: the single-row matmuls)
    first = lm.forward(cache, [t[:-6] for t in texts], logits="all")
    cache.commit_all()
    chain = lm.forward(cache, [t[-6:-1] for t in texts], logits="all")
    cache.commit_all()
    steps = [lm.forward(one, [[t[-1]]], logits="all") for one, t in zip(_single_rows(lm, cache), texts)]
    for r, (text, want) in enumerate(zip(texts, _reference_logits(checkpoints[name], texts))):
        got = torch.cat([first.logits[r, : len(text) - 6], chain.logits[r, :5], steps[r].logits[0]])
        assert ((got - want).abs() <= TOL + TOL * want.abs()).all(), (layout, name, r)
        assert torch.equal(got.argmax(-1), want.argmax(-1))


def _single_rows(lm, cache):
    """One single-row cache of `lm` per row of `cache` (a copy of that row's committed tokens)."""
    from specbuild.reference.decoder.kv_cache import KVCache

    return [KVCache.from_rows(lm.config, [(n, cache.row_kv(r))]) for r, n in enumerate(cache.lengths)]


@pytest.mark.parametrize("layout", [linear.COLUMN_MAJOR, linear.PACKED])
def test_column_major_relays_the_parameters_in_place(checkpoints, kernel, layout):
    """One copy of each weight: the transformers modules hold the transposed storage the lean layers use; a tied
    embedding keeps contiguous rows (the lm_head has its own transposed copy)."""
    kernel(layout)
    lm = CausalLM.from_pretrained(checkpoints["untied"])
    layer, lean = lm.decoder.layers[0], lm.lean.layers[0]
    assert layer.self_attn.o_proj.weight.t().is_contiguous()
    assert layer.self_attn.o_proj.weight.data_ptr() == lean.o.weight.data_ptr()
    assert layer.self_attn.q_proj.weight.data_ptr() == lean.wqkv.data_ptr() and lean.wqkv.t().is_contiguous()
    assert lm.lm_head.weight.t().is_contiguous()
    assert lean.qkv.weight.data_ptr() == lean.wqkv.data_ptr()  # Linear kept the fused copy

    tied = CausalLM.from_pretrained(checkpoints["tied"])
    assert tied.lean.embed.is_contiguous() and tied.lean.lm_head.weight.t().is_contiguous()

    # a down-projection (more inputs than outputs, 688 -> 128) keeps the checkpoint's rows under the packed rule
    # (one and two rows read it faster so there), and is transposed like the others under the column-major rule
    down = layer.mlp.down_proj.weight
    assert down.data_ptr() == lean.down.weight.data_ptr()
    assert down.is_contiguous() if layout == linear.PACKED else down.t().is_contiguous()


def test_a_measured_plan_keeps_one_copy_of_each_dense_weight_in_its_layout(checkpoints, kernel):
    """Under measured plans that store some shapes row-major (_mixed_times: out > in), the fused q/k/v and gate/up
    weights are built in that layout and shared with the transformers modules, as under the fixed rules."""
    kernel(MIXED)
    lm = CausalLM.from_pretrained(checkpoints["untied"])
    layer, lean = lm.decoder.layers[0], lm.lean.layers[0]
    for name, lin, module in (
        ("qkv", lean.qkv, layer.self_attn.q_proj),
        ("gate_up", lean.gate_up, layer.mlp.gate_proj),
        ("o", lean.o, layer.self_attn.o_proj),
        ("down", lean.down, layer.mlp.down_proj),
    ):
        out_features, in_features = lin.weight.shape
        assert lin.plan is not None and lin.plan.dense == (
            linear.ROW_MAJOR if out_features > in_features else linear.COLUMN_MAJOR
        )
        assert lin.weight.is_contiguous() if lin.plan.dense == linear.ROW_MAJOR else lin.weight.t().is_contiguous()
        assert module.weight.data_ptr() == lin.weight.data_ptr(), name
        assert lin.plan.packed_rows == frozenset({3, 4, 16, 32}), name
    assert lean.qkv.weight.data_ptr() == lean.wqkv.data_ptr()


def test_packed_copies_only_the_larger_matrices_and_uses_them_for_several_rows(checkpoints, kernel, monkeypatch):
    kernel(linear.COLUMN_MAJOR)
    assert CausalLM.from_pretrained(checkpoints["untied"]).lean.lm_head.packed is None
    kernel(linear.PACKED)
    lm = CausalLM.from_pretrained(checkpoints["untied"])
    if not torch.backends.mkldnn.is_available():
        pytest.skip("this torch build has no oneDNN")
    head, o = lm.lean.lm_head, lm.lean.layers[0].o  # 1200 x 128 = 153600 weights; o: 128 x 128
    assert head.packed is not None and o.packed is None
    calls = []
    real = torch.ops.mkldnn._linear_pointwise
    monkeypatch.setattr(torch.ops.mkldnn, "_linear_pointwise", lambda *a: calls.append(a[0].shape) or real(*a))
    for rows in range(1, linear.PACK_FROM_ROWS + 1):
        head(torch.ones(1, rows, 128))
    assert calls == [(1, linear.PACK_FROM_ROWS, 128)]


def test_the_default_is_measured_against_the_rule_of_the_cpu_vendor(kernel, monkeypatch):
    kernel(None)
    assert linear.matmul_rule() == linear.MEASURED
    monkeypatch.setattr(linear.torch.backends.mkl, "is_available", lambda: True)
    for vendor, want in (("GenuineIntel", linear.COLUMN_MAJOR), ("AuthenticAMD", linear.PACKED), ("", linear.PACKED)):
        monkeypatch.setattr(linear.cpu, "vendor", lambda v=vendor: v)
        assert linear.default_rule() == want, vendor
    seen = []
    fake = mc.Calibration(None, {}, lambda shape: seen.append(shape) or _mixed_times(shape))
    monkeypatch.setattr(mc, "calibration", lambda: fake)
    monkeypatch.setattr(mc, "choose", lambda times, default: seen.append(default) or default)
    assert linear.float32_plan((2048, 128)) == linear.fixed_plan((2048, 128), linear.PACKED)  # what it was given
    assert seen == [(2048, 128), linear.fixed_plan((2048, 128), linear.PACKED)]
    monkeypatch.setenv(linear.MATMUL_ENV, linear.COLUMN_MAJOR)
    linear.matmul_rule.cache_clear()
    assert linear.matmul_rule() == linear.COLUMN_MAJOR


def test_a_bad_value_names_the_variable(checkpoints, kernel):
    kernel("fastest")
    with pytest.raises(UserError, match="SPECBUILD_REFERENCE_MATMUL='fastest'.*measured .*, column-major or packed"):
        CausalLM.from_pretrained(checkpoints["untied"])
