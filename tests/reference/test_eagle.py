"""EAGLE-1 (static tree) and EAGLE-2 (dynamic tree) on the reference runtime: greedy output equals
autoregressive decoding token for token (batch 1 and in-flight mixed-length batches), both KV caches (target and
head) equal fresh prefills after tree-path compaction, EAGLE-2 sizes and re-ranks its tree as specified, and
sampled output has the target's distribution (lossless recursive rejection sampling)."""

from __future__ import annotations

import pytest
import torch

from specbuild.errors import UserError
from specbuild.reference.decoder.batch import Batch
from specbuild.reference.decoder.executor import SamplingConfig
from specbuild.methods.eagle.decoder import EagleDecoder, _Growing, dynamic_tree_size
from specbuild.reference.decoder.sequence import Sequence
from tree_helpers import (
    SHIPPED_TINY,
    chi_square_pvalue,
    exact_second_third_token_distribution,
    fit_eagle,
    make_engine,
    mixed_requests,
    prompts,
    requests,
    run,
    save_random_eagle,
    save_random_llama,
    second_third_token_histogram,
)

VOCAB = 24
DEPTH = 3
CHOICES = [[0], [1], [2], [3], [0, 0], [0, 1], [1, 0], [2, 0], [0, 0, 0], [0, 0, 1], [0, 1, 0], [1, 0, 0]]
TOP_K = 3


@pytest.fixture(scope="module", autouse=True)
def _threads():
    torch.set_num_threads(1)


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    root = tmp_path_factory.mktemp("eagle")
    target = save_random_llama(root / "target", vocab=VOCAB, hidden=64, layers=2, seed=0)
    fitted = fit_eagle(root / "eagle_fit", target)  # a few seconds of training: drafts get accepted
    random_head = save_random_eagle(root / "eagle_random", target, seed=5)
    extra = {"num_eagle_layers": DEPTH, "max_non_leaves_per_layer": 10}
    size = dynamic_tree_size(TOP_K, DEPTH, 63)
    return {
        "ar": make_engine(root / "ar", target, "none"),
        "eagle1": make_engine(
            root / "e1",
            target,
            "eagle",
            decoding={"eagle_choices": CHOICES},
            extra_dirs={"eagle": fitted},
            pretrained_extra=extra,
            max_draft_len=len(CHOICES),
        ),
        "eagle2": make_engine(
            root / "e2",
            target,
            "eagle",  # a bfloat16 head: the drafter's dtype is free
            decoding={"use_dynamic_tree": True, "dynamic_tree_max_top_k": TOP_K, "draft_dtype": "bfloat16"},
            extra_dirs={"eagle": fitted},
            pretrained_extra=extra,
            max_draft_len=size,
        ),
        "eagle2_small": make_engine(
            root / "e2s",
            target,
            "eagle",
            decoding={"use_dynamic_tree": True, "dynamic_tree_max_top_k": TOP_K},
            extra_dirs={"eagle": fitted},
            pretrained_extra=extra,
            max_draft_len=7,
        ),
        "eagle1_fp32": make_engine(
            root / "e1f",
            target,
            "eagle",
            decoding={"eagle_choices": CHOICES, "draft_dtype": "float32"},
            extra_dirs={"eagle": fitted},
            pretrained_extra=extra,
            max_draft_len=len(CHOICES),
        ),
        "eagle1_random": make_engine(
            root / "e1r",
            target,
            "eagle",
            decoding={"eagle_choices": CHOICES},
            extra_dirs={"eagle": random_head},
            pretrained_extra=extra,
            max_draft_len=len(CHOICES),
        ),
    }


@pytest.mark.parametrize("name", ["eagle1", "eagle2", "eagle2_small", "eagle1_fp32", "eagle1_random"])
@pytest.mark.parametrize("batch_size", [1, 8])
def test_greedy_eagle_equals_autoregressive(engines, name, batch_size):
    expected = [r.output_ids for r in run(engines["ar"], mixed_requests(VOCAB, 50, seed=7), batch_size=1)]
    results = run(engines[name], mixed_requests(VOCAB, 50, seed=7), batch_size=batch_size)
    assert [r.output_ids for r in results] == expected
    if name != "eagle1_random":
        multi = sum(a >= 2 for r in results for a in r.stats.accepted_per_step)
        assert multi > 20  # multi-token paths were accepted and compacted


def _step_manually(engine, n_steps=6, n_rows=4):
    method = EagleDecoder(engine)
    seqs = [Sequence.start(i, req) for i, req in enumerate(requests(prompts(VOCAB, n_rows, seed=3), 40))]
    batch = Batch(seqs)
    for seq, out in zip(seqs, method.prefill(batch)):
        seq.append(out.tokens)
    for _ in range(n_steps):
        for seq, out in zip(seqs, method.step(batch)):
            seq.append(out.tokens)
        yield method, batch


@pytest.mark.parametrize("name", ["eagle1_fp32", "eagle2", "eagle1"])
def test_caches_after_tree_compaction_equal_fresh_prefill(engines, name):
    engine = engines[name]
    model = engine.model
    for method, batch in _step_manually(engine):
        target_kv, head_kv = batch.caches["target"], batch.caches["eagle"]
        for r, seq in enumerate(batch.seqs):
            n = len(seq.tokens) - 1
            assert target_kv.lengths[r] == n
            fresh = model.new_cache(1)
            out = model.forward(fresh, [seq.tokens[:-1]], logits="none")
            for mine, ref in zip(target_kv.store.layers, fresh.store.layers):
                torch.testing.assert_close(mine.keys[r, :, :n], ref.keys[0, :, :n], atol=1e-5, rtol=1e-5)
                torch.testing.assert_close(mine.values[r, :, :n], ref.values[0, :, :n], atol=1e-5, rtol=1e-5)
            # head cache: entries (f_p, x_{p+1}) for p < m, f_p the target's true features
            m = head_kv.lengths[r]
            features = torch.cat([out.hidden[0, :n], *seq.state["eagle_features"]])[:m].to(method.draft_dtype)
            fresh_head = method.head.new_cache()
            method.head(
                features[None], torch.tensor([seq.tokens[1 : m + 1]]), torch.arange(m)[None], past_key_values=fresh_head
            )
            tol = 1e-5 if method.draft_dtype == torch.float32 else 3e-2  # the bf16 head of "eagle2"
            torch.testing.assert_close(
                head_kv.store.layers[0].keys[r, :, :m], fresh_head.layers[0].keys[0], atol=tol, rtol=tol
            )


def test_dynamic_tree_size_and_ranking(engines):
    assert dynamic_tree_size(10, 4, 63) == 63 and dynamic_tree_size(3, 3, 100) == 21
    assert dynamic_tree_size(2, 1, 63) == 2 and dynamic_tree_size(4, 0, 63) == 0
    # every drafted tree has exactly the specified size unless a request's budget cut its depth
    method = EagleDecoder(engines["eagle2_small"])
    sizes = []
    original = method.draft

    def spy(batch):
        drafts = original(batch)
        sizes.extend((d.tree.num_draft_tokens, d.tree.max_depth) for d in drafts)
        return drafts

    method.draft = spy
    seqs = [Sequence.start(i, req) for i, req in enumerate(requests(prompts(VOCAB, 3, seed=1), 30))]
    batch = Batch(seqs)
    for seq, out in zip(seqs, method.prefill(batch)):
        seq.append(out.tokens)
    for _ in range(4):
        for seq, out in zip(seqs, method.step(batch)):
            seq.append(out.tokens)
    assert sizes and all(n == 7 for n, _ in sizes)


def test_rerank_keeps_best_nodes_and_their_ancestors():
    g = _Growing(root_feature=torch.zeros(1), root_position=0, tokens=[9])
    a = g.add(0, 1, -0.1)
    b = g.add(0, 2, -2.0)
    a1 = g.add(a, 3, -0.1)  # tie with its parent: the parent must still come first
    g.add(a, 4, -3.0)
    b1 = g.add(b, 5, -2.5)
    a11 = g.add(a1, 6, -0.5)
    draft = EagleDecoder._rerank(g, 4)
    tree, tokens = draft.tree, draft.tokens
    assert sorted(tokens[1:]) == sorted([g.tokens[n] for n in (a, a1, a11, b)])
    assert b1 not in tokens
    for node in range(1, tree.size):  # parents precede children and carry the original parent token
        assert tree.parents[node] < node
    by_token = {tokens[n]: n for n in range(tree.size)}
    assert tree.parents[by_token[6]] == by_token[3] and tree.parents[by_token[3]] == by_token[1]


@pytest.mark.parametrize("name", ["eagle1", "eagle2"])
def test_sampling_is_lossless(engines, name):
    sampling = SamplingConfig(temperature=0.9, top_k=12, top_p=0.95)
    prompt = prompts(VOCAB, 1, seed=11)[0]
    samples = 2000
    counts = second_third_token_histogram(engines[name], prompt, sampling, samples)
    expected = samples * exact_second_third_token_distribution(engines["ar"].model, prompt, sampling)
    assert chi_square_pvalue(counts, expected) > 1e-3


def test_choices_deeper_than_eagle_layers_are_a_user_error(engines):
    with pytest.raises(UserError, match="eagle_choices"):
        EagleDecoder(engines["eagle1"], decoding={"eagle_choices": [[0], [0, 0], [0, 0, 0], [0, 0, 0, 0]]})


@pytest.mark.skipif(not (SHIPPED_TINY / "eagle").is_dir(), reason="checkpoints/tiny (the zoo) is not built yet")
@pytest.mark.parametrize("dynamic", [False, True])
@pytest.mark.parametrize("batch_size", [1, 8])
def test_greedy_eagle_on_shipped_tiny_model(tmp_path, dynamic, batch_size):
    target = SHIPPED_TINY / "target"
    decoding = {"use_dynamic_tree": True, "dynamic_tree_max_top_k": 4} if dynamic else {}
    extra = {"num_eagle_layers": 4, "max_non_leaves_per_layer": 10}
    ar = make_engine(tmp_path / "ar", target, "none", max_seq_len=256, max_input_len=128)
    eagle = make_engine(
        tmp_path / "eagle",
        target,
        "eagle",
        decoding=decoding,
        pretrained_extra=extra,
        extra_dirs={"eagle": SHIPPED_TINY / "eagle"},
        max_seq_len=256,
        max_input_len=128,
    )
    vocab = ar.vocab_size
    expected = [r.output_ids for r in run(ar, mixed_requests(vocab, 50, seed=21, max_new=32), batch_size=8)]
    results = run(eagle, mixed_requests(vocab, 50, seed=21, max_new=32), batch_size=batch_size)
    assert [r.output_ids for r in results] == expected
    # a trained head: drafts are really accepted (catches a feature/position misalignment that exactness would not)
    steps = sum(r.stats.steps for r in results)
    assert sum(r.stats.total_accepted_draft_tokens for r in results) / steps > 1.0


def test_static_draft_equals_cache_free_recomputation(engines):
    """The tree the method drafts (head cache, catch-up, tree masks) equals one computed from scratch: the head
    run without a cache over all entries (f_p, x_{p+1}) and then down each tree path."""
    engine = engines["eagle1_fp32"]
    model = engine.model
    checked = 0
    for method, batch in _step_manually(engine, n_steps=4, n_rows=3):
        method.catch_up(batch)
        drafts = method.draft(batch)
        batch.caches["eagle"].rollback()
        for r, seq in enumerate(batch.seqs):
            tree, tokens = drafts[r].tree, drafts[r].tokens
            length = len(seq.tokens) - 1
            hidden = model.decoder(input_ids=torch.tensor([seq.tokens[:-1]])).last_hidden_state[0]
            for node in range(1, tree.size):
                path = tree.ancestors[node]  # root first
                feats = list(hidden[:length])
                ids = list(seq.tokens[1:])  # entry p: (f_p, x_{p+1}), the root x_L included
                out = None
                for depth, n in enumerate(path[:-1]):
                    if depth > 0:  # extend with the drafted entry (f^ of the parent, token of n)
                        feats.append(out[0, -1])
                        ids.append(tokens[n])
                    out = method.head(torch.stack(feats)[None], torch.tensor([ids]), torch.arange(len(ids))[None])
                logits = method.draft_logprobs(out[0, -1])
                rank = tree.paths[node][-1]
                assert tokens[node] == int(torch.topk(logits, rank + 1).indices[rank])
                checked += 1
    assert checked > 20


def test_dynamic_expansion_follows_eagle2():
    """EAGLE-2 on a synthetic drafter (log-probs a fixed function of the node's token): depth 1 is the root's top-K;
    each deeper level expands exactly the top-K nodes of the level above by cumulative log-prob, each into its own
    top-K children; K + K*K*(D-1) nodes are drafted and the best `size` of them (by score) are kept."""
    k, depth, vocab, size = 3, 4, 9, 20
    gen = torch.Generator().manual_seed(0)
    table = torch.log_softmax(torch.randn(vocab + 1, vocab, generator=gen) * 2, dim=-1)  # row = parent token

    method = EagleDecoder.__new__(EagleDecoder)
    method.top_k, method.max_draft_len = k, size
    drafted: list[_Growing] = []

    def fake_expand(kv, rows, expand):
        for g, nodes in zip(rows, expand):
            for n in nodes:
                g.logprobs[n] = table[g.tokens[n]]

    method._expand = fake_expand
    g = _Growing(root_feature=torch.zeros(1), root_position=0, tokens=[vocab])
    g.logprobs[0] = table[vocab]
    original_rerank = EagleDecoder._rerank

    def spy_rerank(grown, n):
        drafted.append(grown)
        return original_rerank(grown, n)

    method._rerank = spy_rerank
    (draft,) = method._grow_dynamic(None, [g], [depth])
    grown = drafted[0]
    assert len(grown.tokens) - 1 == k + k * k * (depth - 1)
    by_depth = {d: [n for n in range(1, len(grown.tokens)) if grown.depths[n] == d] for d in range(1, depth + 1)}
    assert sorted(grown.tokens[n] for n in by_depth[1]) == sorted(torch.topk(table[vocab], k).indices.tolist())
    for d in range(1, depth):
        parents = {grown.parents[n] for n in by_depth[d + 1]}
        best = sorted(by_depth[d], key=lambda n: -grown.scores[n])[:k]
        assert parents == set(best)
        for p in parents:
            children = [n for n in by_depth[d + 1] if grown.parents[n] == p]
            assert sorted(grown.tokens[c] for c in children) == sorted(
                torch.topk(table[grown.tokens[p]], k).indices.tolist()
            )
            for c in children:
                assert abs(grown.scores[c] - grown.scores[p] - float(table[grown.tokens[p], grown.tokens[c]])) < 1e-5
    assert draft.tree.num_draft_tokens == size
    tokens_kept = sorted(draft.tokens[1:])
    expected = sorted(
        grown.tokens[n]
        for n in sorted(range(1, len(grown.tokens)), key=lambda n: (-grown.scores[n], grown.depths[n], n))[:size]
    )
    assert tokens_kept == expected
