"""The lean EAGLE-3 head (lean/heads.py `LeanEagle3Head`) computes what `specbuild.heads.eagle3.Eagle3HeadModule` does:
the same `out` and draft logits to float32 rounding, over the same position-addressed KV cache, for a prompt of
captured (fused) target states in rows of different lengths and then a token tree of the head's own outputs."""

from __future__ import annotations

import pytest
import torch

from specbuild.heads.eagle3 import load_eagle3_head
from specbuild.reference.decoder.kv_cache import KVCache
from specbuild.reference.decoder.lean.heads import LeanEagle3Head

# `out` reaches ~100 in magnitude (float32's spacing there is ~8e-6), and the lean path's matmuls (column-major
# MKL, oneDNN-packed copies) sum in another order than the module's: 6e-5 apart at most on the AMD EPYC, whereas a
# dropped mask moves them by whole units and a RoPE theta 1% off by 1.5e-2
TOL = dict(atol=2e-4, rtol=1e-4)


@pytest.fixture(scope="module")
def heads(shipped_tiny):
    module = load_eagle3_head(shipped_tiny / "eagle3", dtype=torch.float32)
    return module, LeanEagle3Head(module)


def _both(heads, caches, x, embeds, n_new, **plan_args):
    module, lean = heads
    outs = []
    for kv, run in zip(caches, ("module", "lean")):
        plan = kv.plan_forward(n_new, **plan_args)
        with torch.inference_mode():
            if run == "module":
                out = module(x, embeds, plan.position_ids, attention_mask=plan.additive_mask(x.dtype), cache=kv.store)
                logits = module.logits(out)
            else:
                out = lean.forward(x, embeds, plan, kv)
                logits = lean.logits(out)
        kv.check_appended(plan)
        outs.append((out, logits))
    return outs


def test_the_lean_eagle3_head_is_the_module(heads):
    module, _ = heads
    torch.manual_seed(0)
    hidden = module.hidden_size
    caches = [KVCache(module.config, 2) for _ in range(2)]
    # prefill: fused target states (num_captured x hidden wide: the fc runs), rows of 7 and 5 entries
    x = torch.randn(2, 7, module.num_captured * hidden)
    embeds = torch.randn(2, 7, hidden)
    (m_out, m_logits), (l_out, l_logits) = _both(heads, caches, x, embeds, [7, 5])
    torch.testing.assert_close(l_out[0], m_out[0], **TOL)
    torch.testing.assert_close(l_out[1, :5], m_out[1, :5], **TOL)
    torch.testing.assert_close(l_logits[1, :5], m_logits[1, :5], **TOL)
    for kv in caches:
        kv.commit_all()
    # a tree step of the head's own outputs (hidden wide: no fc): root, two children of it, one grandchild
    x = torch.randn(2, 4, hidden)
    embeds = torch.randn(2, 4, hidden)
    tree = torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [1, 1, 0, 1]], dtype=torch.bool)
    positions = [[7, 8, 8, 9], [5, 6, 6, 7]]
    (m_out, m_logits), (l_out, l_logits) = _both(
        heads, caches, x, embeds, [4, 4], positions=positions, attend=[tree, tree]
    )
    torch.testing.assert_close(l_out, m_out, **TOL)
    torch.testing.assert_close(l_logits, m_logits, **TOL)
    assert l_logits.shape[-1] == module.draft_vocab_size < module.vocab_size
