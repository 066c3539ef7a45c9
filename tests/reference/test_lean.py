"""The lean forward equals transformers' forward: logits within float32 rounding for prefill, decode steps, token
trees with masks and ragged rows; captured layer outputs equal transformers' hidden states; Mistral and Qwen2
checkpoints take the lean path, other decoders fall back to transformers' own forward over the same cache.

References are transformers' `LlamaForCausalLM` (and friends) run without any cache on each row's full text
(`CausalLM.full_logits`, `output_hidden_states`), so they share nothing with the lean code or the KVCache.
"""

from __future__ import annotations

import random

import pytest
import torch

from specbuild.errors import UserError
from specbuild.reference.decoder.model import CausalLM

TOL = 1e-5  # float32 rounding: |ours - transformers| <= TOL + TOL * |transformers|


def close(got: torch.Tensor, want: torch.Tensor, tol: float = TOL) -> bool:
    return bool(((got - want).abs() <= tol + tol * want.abs()).all())


def _save(folder, config_cls, model_cls, seed=0, **overrides):
    torch.manual_seed(seed)
    shape = dict(
        vocab_size=96,
        hidden_size=64,
        intermediate_size=112,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        initializer_range=0.2,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
    )
    cfg = config_cls(**{**shape, **overrides})
    model_cls(cfg).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    from transformers import (
        LlamaConfig,
        LlamaForCausalLM,
        MistralConfig,
        MistralForCausalLM,
        Qwen2Config,
        Qwen2ForCausalLM,
    )

    root = tmp_path_factory.mktemp("lean")
    return {
        "llama": _save(root / "llama", LlamaConfig, LlamaForCausalLM),
        "llama_mha_bias": _save(
            root / "llama_mha_bias",
            LlamaConfig,
            LlamaForCausalLM,
            seed=1,
            num_key_value_heads=4,
            attention_bias=True,
            mlp_bias=True,
        ),
        "mistral": _save(root / "mistral", MistralConfig, MistralForCausalLM, seed=2, sliding_window=None),
        "qwen2": _save(root / "qwen2", Qwen2Config, Qwen2ForCausalLM, seed=3, use_sliding_window=False),
        "llama_gelu": _save(root / "llama_gelu", LlamaConfig, LlamaForCausalLM, seed=4, hidden_act="gelu"),
    }


def _ancestors(parents, i):
    path = []
    while i >= 0:
        path.append(i)
        i = parents[i]
    return path[::-1]


def _random_tree(rng, n):
    parents = [-1] + [rng.randrange(i) for i in range(1, n)]
    mask = torch.zeros(n, n, dtype=torch.bool)
    for i in range(n):
        mask[i, _ancestors(parents, i)] = True
    depth = [len(_ancestors(parents, i)) - 1 for i in range(n)]
    return parents, mask, depth


def check_against_transformers(lm: CausalLM, seed: int = 0, rounds: int = 5, tol: float = TOL) -> None:
    """Ragged prefill, then rounds of chains (partly committed) and token trees (one path committed) on three
    rows of different lengths; every logit is compared with a cache-free transformers forward of its text."""
    rng = random.Random(seed)
    vocab = lm.vocab_size
    texts = [[rng.randrange(vocab) for _ in range(n)] for n in (9, 2, 15)]
    cache = lm.new_cache(3)
    out = lm.forward(cache, texts, logits="all")
    for r, text in enumerate(texts):
        assert close(out.logits[r, : len(text)], lm.full_logits(text), tol)
    cache.commit_all()
    for step in range(rounds):
        if step % 2 == 0:  # a chain per row (a row may feed nothing), keep a random prefix
            chains = [[rng.randrange(vocab) for _ in range(rng.randrange(0, 5))] for _ in texts]
            out = lm.forward(cache, chains, logits="all")
            for r, chain in enumerate(chains):
                if chain:
                    ref = lm.full_logits(texts[r] + chain)[-len(chain) :]
                    assert close(out.logits[r, : len(chain)], ref, tol), (step, r)
            keep = [rng.randrange(len(c) + 1) for c in chains]
            cache.commit_prefix(keep)
            for r, k in enumerate(keep):
                texts[r] += chains[r][:k]
        else:  # a token tree per row below the last committed token, one root-to-node path kept
            trees = [_random_tree(rng, rng.randrange(1, 8)) for _ in texts]
            tokens = [[rng.randrange(vocab) for _ in parents] for parents, _, _ in trees]
            positions = [[len(texts[r]) + d for d in depth] for r, (_, _, depth) in enumerate(trees)]
            out = lm.forward(cache, tokens, positions=positions, attend=[m for _, m, _ in trees], logits="all")
            keep = []
            for r, (parents, _, _) in enumerate(trees):
                for i in range(len(parents)):
                    path = [tokens[r][j] for j in _ancestors(parents, i)]
                    ref = lm.full_logits(texts[r] + path)[-1]
                    assert close(out.logits[r, i], ref, tol), (step, r, i)
                path = _ancestors(parents, rng.randrange(len(parents)))
                keep.append(path)
                texts[r] += [tokens[r][j] for j in path]
            cache.commit(keep)
    probe = [[rng.randrange(vocab)] for _ in texts]
    out = lm.forward(cache, probe, logits="last")
    for r, text in enumerate(texts):
        assert close(out.logits[r], lm.full_logits(text + probe[r])[-1], tol)


@pytest.fixture(autouse=True)
def default_forward(monkeypatch):
    """These tests choose the path themselves (the suite may run with SPECBUILD_REFERENCE_FORWARD set)."""
    monkeypatch.delenv("SPECBUILD_REFERENCE_FORWARD", raising=False)


@pytest.mark.parametrize("name", ["llama", "llama_mha_bias", "mistral", "qwen2"])
def test_lean_logits_equal_transformers(checkpoints, name):
    lm = CausalLM.from_pretrained(checkpoints[name])
    assert lm.implementation == "lean", name  # the default for these architectures
    check_against_transformers(lm, seed=len(name))


def test_transformers_path_over_the_same_cache(checkpoints):
    lm = CausalLM.from_pretrained(checkpoints["llama"], forward="transformers")
    assert lm.implementation == "transformers" and lm.lean is None
    check_against_transformers(lm, seed=7)


def test_other_decoders_fall_back_to_transformers(checkpoints, monkeypatch):
    lm = CausalLM.from_pretrained(checkpoints["llama_gelu"])
    assert lm.implementation == "transformers"
    check_against_transformers(lm, seed=8, rounds=3)
    with pytest.raises(UserError, match="hidden_act"):
        CausalLM.from_pretrained(checkpoints["llama_gelu"], forward="lean")
    monkeypatch.setenv("SPECBUILD_REFERENCE_FORWARD", "transformers")
    assert CausalLM.from_pretrained(checkpoints["llama"]).implementation == "transformers"
    monkeypatch.setenv("SPECBUILD_REFERENCE_FORWARD", "fast")
    with pytest.raises(UserError, match="SPECBUILD_REFERENCE_FORWARD"):
        CausalLM.from_pretrained(checkpoints["llama"])


def test_lean_and_transformers_paths_agree_step_by_step(checkpoints):
    """Both implementations over their own caches: identical shapes, logits and hidden states within rounding,
    and greedy continuations of ragged rows token for token."""
    lean = CausalLM.from_pretrained(checkpoints["llama"])
    ref = CausalLM.from_pretrained(checkpoints["llama"], forward="transformers")
    rng = random.Random(3)
    texts = [[rng.randrange(lean.vocab_size) for _ in range(n)] for n in (5, 11)]
    caches = {m: m.new_cache(2) for m in (lean, ref)}
    feed = texts
    outs: dict = {}
    for _ in range(12):
        for m in (lean, ref):
            outs[m] = m.forward(caches[m], feed, logits="last")
            caches[m].commit_all()
        assert close(outs[lean].logits, outs[ref].logits)
        assert close(outs[lean].hidden, outs[ref].hidden)
        feed = [[int(t)] for t in outs[lean].logits.argmax(-1)]
        assert feed == [[int(t)] for t in outs[ref].logits.argmax(-1)]


@pytest.mark.parametrize("forward", ["lean", "transformers"])
def test_capture_layers_are_decoder_layer_outputs(checkpoints, forward):
    """ForwardOutput.captured: the chosen layers' outputs (before the final norm), concatenated in the given order;
    compared with transformers' output_hidden_states on the whole text."""
    lm = CausalLM.from_pretrained(checkpoints["llama"], forward=forward)
    rng = random.Random(5)
    texts = [[rng.randrange(lm.vocab_size) for _ in range(n)] for n in (6, 10)]
    cache = lm.new_cache(2)
    first = lm.forward(cache, [t[:-3] for t in texts], logits="none", capture_layers=(2, 0))
    cache.commit_all()
    second = lm.forward(cache, [t[-3:] for t in texts], logits="none", capture_layers=(1, 2, 0))
    H = lm.hidden_size
    assert first.captured.shape == (2, 7, 2 * H) and second.captured.shape == (2, 3, 3 * H)
    assert lm.forward(lm.new_cache(1), [[1]], logits="none").captured is None
    with torch.no_grad():
        for r, text in enumerate(texts):
            ref = lm.decoder(input_ids=torch.tensor([text]), output_hidden_states=True)
            layer = {0: ref.hidden_states[1][0], 1: ref.hidden_states[2][0]}  # the last entry is after the norm
            n = len(text) - 3
            got_first = first.captured[r, :n]
            got_second = second.captured[r]
            torch.testing.assert_close(got_first[:, H:], layer[0][:n], atol=TOL, rtol=TOL)
            torch.testing.assert_close(got_second[:, :H], layer[1][n:], atol=TOL, rtol=TOL)
            torch.testing.assert_close(got_second[:, 2 * H :], layer[0][n:], atol=TOL, rtol=TOL)
            final = lm.decoder.norm(torch.cat([got_first[:, :H], got_second[:, H : 2 * H]]))
            torch.testing.assert_close(final, ref.last_hidden_state[0], atol=TOL, rtol=TOL)
    with pytest.raises(UserError, match="capture layer 3 does not exist"):
        lm.forward(lm.new_cache(1), [[1]], capture_layers=(3,))


def test_bfloat16_lean_matches_transformers_bfloat16(checkpoints):
    """bfloat16 compute: the lean forward follows transformers' bf16 arithmetic (norms in float32, cast back), so
    logits agree to bf16 rounding and the greedy tokens agree."""
    lean = CausalLM.from_pretrained(checkpoints["llama"], dtype="bfloat16")
    ref = CausalLM.from_pretrained(checkpoints["llama"], dtype="bfloat16", forward="transformers")
    assert lean.implementation == "lean" and lean.dtype == torch.bfloat16
    rng = random.Random(9)
    text = [rng.randrange(lean.vocab_size) for _ in range(12)]
    got = lean.forward(lean.new_cache(1), [text], logits="all").logits[0]
    want = ref.full_logits(text)
    scale = want.abs().max().item()
    assert (got - want).abs().max().item() < 0.03 * scale
    assert (got.argmax(-1) == want.argmax(-1)).float().mean().item() >= 0.9


def test_fused_weights_are_shared_with_the_transformers_modules(checkpoints):
    """The lean layers' fused q/k/v and gate/up matrices are the transformers modules' weights (views), not copies."""
    lm = CausalLM.from_pretrained(checkpoints["llama"])
    attn = lm.decoder.layers[0].self_attn
    fused = lm.lean.layers[0].wqkv
    assert attn.q_proj.weight.data_ptr() == fused.data_ptr()
    assert attn.k_proj.weight.data_ptr() == fused[attn.q_proj.weight.shape[0] :].data_ptr()


def test_cache_slots_are_positions_and_chain_commits_move_nothing(checkpoints):
    """Position-addressed cache: a committed token's KV sits at the slot equal to its position; committing a
    chain leaves the buffer untouched and committing a tree path moves only the entries off their position."""
    lm = CausalLM.from_pretrained(checkpoints["llama"])
    cache = lm.new_cache(1)
    lm.forward(cache, [[1, 2, 3, 4]], logits="none")
    cache.commit_all()
    lm.forward(cache, [[5, 6, 7]], logits="none")
    before = cache.buffer.clone()
    cache.commit_prefix([2])
    assert torch.equal(cache.buffer, before) and cache.lengths == [6]
    # tree below position 6: nodes 0 (pos 6), 1 (pos 7, child of 0), 2 (pos 7, child of 0), 3 (pos 8, child of 2)
    mask = torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [1, 0, 1, 1]], dtype=torch.bool)
    lm.forward(cache, [[8, 9, 10, 11]], positions=[[6, 7, 7, 8]], attend=[mask], logits="none")
    written = cache.buffer.clone()
    cache.commit([[0, 2, 3]])
    assert cache.lengths == [9]
    torch.testing.assert_close(cache.buffer[..., :7, :], written[..., :7, :], atol=0, rtol=0)  # node 0: in place
    torch.testing.assert_close(cache.buffer[..., 7:9, :], written[..., 8:10, :], atol=0, rtol=0)  # nodes 2, 3 moved
    fresh = lm.new_cache(1)
    lm.forward(fresh, [[1, 2, 3, 4, 5, 6, 8, 10, 11]], logits="none")
    torch.testing.assert_close(cache.buffer[..., :9, :], fresh.buffer[..., :9, :], atol=TOL, rtol=TOL)
