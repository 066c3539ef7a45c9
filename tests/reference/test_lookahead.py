"""Lookahead decoding on the reference runtime: the window/pool mechanics and tree layout (TensorRT-LLM's
max_draft_len formula, the paper's attention pattern), greedy output equal to autoregressive decoding token for
token (batch 1 and in-flight mixed-length batches), cache after compaction equal to a fresh prefill, and
lossless sampling."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from specbuild.errors import UserError
from specbuild.reference.decoder.batch import Batch
from specbuild.reference.decoder.executor import SamplingConfig
from specbuild.methods.lookahead.decoder import (
    LookaheadDecoder,
    NgramPool,
    Window,
    build_tree,
    jacobi_update,
    lookahead_max_draft_len,
)
from specbuild.reference.decoder.sequence import Sequence
from tree_helpers import (
    SHIPPED_TINY,
    chi_square_pvalue,
    exact_second_third_token_distribution,
    make_engine,
    mixed_requests,
    prompts,
    requests,
    run,
    save_random_llama,
    second_third_token_histogram,
)

VOCAB = 24
CONFIGS = {"w4n4g3": (4, 4, 3), "w2n2g1": (2, 2, 1), "w5n3g2": (5, 3, 2), "w3n1g0": (3, 1, 0)}


@pytest.fixture(scope="module", autouse=True)
def _threads():
    torch.set_num_threads(1)


def _decoding(w, n, g):
    return {"lookahead_window_size": w, "lookahead_ngram_size": n, "lookahead_verification_set_size": g}


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    root = tmp_path_factory.mktemp("lookahead")
    target = save_random_llama(root / "target", vocab=VOCAB, hidden=64, layers=2, seed=0)
    out = {"ar": make_engine(root / "ar", target, "none")}
    for name, (w, n, g) in CONFIGS.items():
        out[name] = make_engine(
            root / name,
            target,
            "lookahead",
            decoding=_decoding(w, n, g),
            max_draft_len=lookahead_max_draft_len(w, n, g),
        )
    return out


# ---------------------------------------------------------------- mechanics


def test_max_draft_len_formula_matches_tensorrt_llm_examples():
    assert lookahead_max_draft_len(7, 7, 7) == 83  # examples/lookahead/README.md
    assert lookahead_max_draft_len(4, 4, 4) == 23
    assert lookahead_max_draft_len(1, 1, 0) == 0  # no speculation
    assert lookahead_max_draft_len(2, 2, 1) == 2


@pytest.mark.parametrize("w, n, g", [(7, 7, 7), (4, 4, 4), (2, 2, 1), (5, 3, 2), (3, 2, 0)])
def test_full_step_tree_has_exactly_max_draft_len_draft_tokens(w, n, g):
    pool = NgramPool(g)
    for j in range(g):  # g continuations of the root token with distinct first tokens: no trie sharing
        pool.add([100] + [200 + 10 * j + k for k in range(n - 1)])
    levels = [[100] + [1] * (w - 1)] + [[2 + l] * w for l in range(n - 2)]
    step = build_tree(Window(levels, pool, n), root=100, verification_set=g)
    assert step.tree.num_draft_tokens == lookahead_max_draft_len(w, n, g)


def test_lookahead_branch_attention_is_the_papers():
    """Token (level l, column i) sees level-0 columns 0..i and column i of levels 1..l; trie nodes see the root
    and their own prefix; positions are root + i + l."""
    w, n, g = 4, 4, 2
    pool = NgramPool(g)
    pool.add([100, 7, 8, 9])
    pool.add([100, 7, 5, 6])  # shares its first token with the previous one: a trie
    levels = [[100, 11, 12, 13], [21, 22, 23, 24], [31, 32, 33, 34]]
    step = build_tree(Window(levels, pool, n), root=100, verification_set=g)
    tree, nodes = step.tree, step.window_nodes
    for l in range(n - 1):
        for i in range(w):
            node = nodes[l][i]
            expected = {nodes[0][j] for j in range(i + 1)} | {nodes[m][i] for m in range(1, l + 1)}
            assert set(tree.ancestors[node]) == expected
            assert tree.depths[node] == i + l
            assert step.tokens[node] == levels[l][i] or (l, i) == (0, 0)
    trie = [m for m in range(tree.size) if m not in {x for level in nodes for x in level}]
    assert len(trie) == 5  # 7 | 8, 5 | 9, 6
    continuations = sorted(tuple(step.tokens[a] for a in tree.ancestors[m][1:]) for m in trie if not tree.children[m])
    assert continuations == [(7, 5, 6), (7, 8, 9)]


def test_ngram_pool_keeps_the_most_recent_distinct_continuations():
    pool = NgramPool(2)
    for gram in ([1, 2, 3], [1, 4, 5], [1, 2, 3], [1, 6, 7], [9, 9, 9]):
        pool.add(gram)
    assert pool.continuations(1) == [(6, 7), (2, 3)]
    assert pool.continuations(9) == [(9, 9)] and pool.continuations(5) == []


def test_pool_holds_the_prompt_and_generated_ngrams(engines):
    """As TensorRT-LLM's pool manager: seeded with every N-gram of the prompt, then fed the N-grams ending in each
    step's emitted tokens (added last, so they survive the G-per-token limit)."""
    method = LookaheadDecoder(engines["w4n4g3"])
    prompt = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3]
    (seq,) = seqs = [Sequence.start(0, requests([prompt], 30)[0])]
    batch = Batch(seqs)
    seq.append(method.prefill(batch)[0].tokens)
    pool = method._window(seq).pool
    text = seq.tokens
    assert all(tuple(text[i + 1 : i + 4]) in pool.continuations(text[i]) for i in range(len(text) - 3))
    for _ in range(3):
        before = len(seq.tokens)
        seq.append(method.step(batch)[0].tokens)
        text = seq.tokens
        for i in range(before - 3, len(text) - 3):  # 4-grams ending in this step's tokens
            assert tuple(text[i + 1 : i + 4]) in pool.continuations(text[i])


def test_jacobi_update_warms_up_then_harvests_ngrams():
    n = 3
    window = Window([[100, 1, 2]], NgramPool(4), n)
    step = build_tree(window, 100, 0)
    argmax = [0] * step.tree.size
    for i, node in enumerate(step.window_nodes[-1]):
        argmax[node] = 50 + i
    jacobi_update(window, step, argmax)  # warm-up: a second level, no n-grams yet
    assert window.levels == [[100, 1, 2], [50, 51, 52]] and window.pool.by_first == {}
    step = build_tree(window, 100, 0)
    argmax = [0] * step.tree.size
    for i, node in enumerate(step.window_nodes[-1]):
        argmax[node] = 60 + i
    jacobi_update(window, step, argmax)  # full: columns + new tokens are 3-grams; the oldest level goes
    assert window.levels == [[50, 51, 52], [60, 61, 62]]
    assert window.pool.continuations(100) == [(50, 60)]
    assert window.pool.continuations(1) == [(51, 61)] and window.pool.continuations(2) == [(52, 62)]


def test_engine_max_draft_len_too_small_is_a_user_error(engines):
    with pytest.raises(UserError, match="max_draft_len"):
        LookaheadDecoder(engines["w2n2g1"], decoding=_decoding(4, 4, 3))


# ---------------------------------------------------------------- exactness


@pytest.mark.parametrize("name", list(CONFIGS))
@pytest.mark.parametrize("batch_size", [1, 8])
def test_greedy_lookahead_equals_autoregressive(engines, name, batch_size):
    expected = [r.output_ids for r in run(engines["ar"], mixed_requests(VOCAB, 50, seed=7), batch_size=1)]
    results = run(engines[name], mixed_requests(VOCAB, 50, seed=7), batch_size=batch_size)
    assert [r.output_ids for r in results] == expected
    if CONFIGS[name][1] > 2:
        multi = sum(a >= 2 for r in results for a in r.stats.accepted_per_step)
        assert multi > 10  # n-grams of several tokens were accepted and compacted


def test_cache_after_compaction_equals_fresh_prefill(engines):
    engine = engines["w4n4g3"]
    method = LookaheadDecoder(engine)
    seqs = [Sequence.start(i, req) for i, req in enumerate(requests(prompts(VOCAB, 4, seed=3), 60))]
    batch = Batch(seqs)
    for seq, out in zip(seqs, method.prefill(batch)):
        seq.append(out.tokens)
    accepted = 0
    for _ in range(12):
        for seq, out in zip(seqs, method.step(batch)):
            seq.append(out.tokens)
            accepted += out.accepted
        cache = batch.caches["target"]
        for r, seq in enumerate(seqs):
            n = len(seq.tokens) - 1
            assert cache.lengths[r] == n
            fresh = engine.model.new_cache(1)
            engine.model.forward(fresh, [seq.tokens[:-1]], logits="none")
            for mine, ref in zip(cache.store.layers, fresh.store.layers):
                torch.testing.assert_close(mine.keys[r, :, :n], ref.keys[0, :, :n], atol=1e-5, rtol=1e-5)
                torch.testing.assert_close(mine.values[r, :, :n], ref.values[0, :, :n], atol=1e-5, rtol=1e-5)
    assert accepted > 0


def test_sampling_is_lossless(engines, monkeypatch):
    """Sampled output has the target's distribution. The window's first n-grams only appear after a few steps,
    so the pool is seeded with the target's own greedy continuation after every possible first token (a function
    of the prompt, fixed before any coin is flipped): the step that yields tokens 2 and 3 then really accepts."""
    engine, model = engines["w4n4g3"], engines["ar"].model
    sampling = SamplingConfig(temperature=0.9, top_k=12, top_p=0.95)
    prompt = prompts(VOCAB, 2, seed=11)[1]
    seeded = NgramPool(3)
    for first in range(VOCAB):
        tokens = prompt + [first]
        for _ in range(3):
            tokens.append(int(model.full_logits(tokens)[-1].argmax()))
        seeded.add(tokens[len(prompt) :])
    original = LookaheadDecoder._window

    def window_with_seeded_pool(self, seq):
        fresh = "lookahead" not in seq.state
        window = original(self, seq)
        if fresh:
            window.pool.by_first = {k: v.copy() for k, v in seeded.by_first.items()}
        return window

    monkeypatch.setattr(LookaheadDecoder, "_window", window_with_seeded_pool)
    samples = 2500
    counts = second_third_token_histogram(engine, prompt, sampling, samples)
    expected = samples * exact_second_third_token_distribution(model, prompt, sampling)
    assert chi_square_pvalue(counts, expected) > 1e-3
    # the test has teeth: the step after the prefill accepted drafts in a good share of the requests
    reqs = requests([prompt] * 200, 4)
    for seed, req in enumerate(reqs):
        req.sampling = replace(sampling, seed=seed)
    results = run(engine, reqs, batch_size=8)
    assert sum(r.stats.accepted_per_step[0] > 0 for r in results) > 40


@pytest.mark.skipif(not (SHIPPED_TINY / "target").is_dir(), reason="checkpoints/tiny (the zoo) is not built yet")
@pytest.mark.parametrize("batch_size", [1, 8])
def test_greedy_lookahead_on_shipped_tiny_model(tmp_path, batch_size):
    target = SHIPPED_TINY / "target"
    ar = make_engine(tmp_path / "ar", target, "none", max_seq_len=256, max_input_len=128)
    la = make_engine(
        tmp_path / "la",
        target,
        "lookahead",
        decoding=_decoding(4, 4, 4),
        max_draft_len=23,
        max_seq_len=256,
        max_input_len=128,
    )
    vocab = ar.vocab_size
    expected = [r.output_ids for r in run(ar, mixed_requests(vocab, 50, seed=21, max_new=32), batch_size=8)]
    results = run(la, mixed_requests(vocab, 50, seed=21, max_new=32), batch_size=batch_size)
    assert [r.output_ids for r in results] == expected
