"""After any accept/reject pattern the batched cache equals a fresh prefill of the accepted text.

Each check feeds one more token through the cache and compares its logits with a from-scratch forward of the
accepted text plus that token (no cache, batch 1): equal within 1e-5.
"""

from __future__ import annotations

import random

import pytest
import torch

from specbuild.reference.decoder.model import CausalLM

TOL = 1e-5


@pytest.fixture(scope="module")
def lm(models):
    return CausalLM.from_pretrained(models["target"])


def _check_rows(lm, cache, texts, rng):
    """Feed one random token per row; compare each row's logits with a fresh prefill; commit it."""
    probe = [[rng.randrange(lm.vocab_size)] for _ in texts]
    out = lm.forward(cache, probe, logits="last")
    for r, text in enumerate(texts):
        fresh = lm.full_logits(text + probe[r])[-1]
        assert (out.logits[r] - fresh).abs().max().item() < TOL, f"row {r}"
        text.extend(probe[r])
    cache.commit_all()


def _random_tree(rng, n_nodes):
    """parents[i] < i for i >= 1 (node 0 is the root: the row's last token)."""
    return [-1] + [rng.randrange(i) for i in range(1, n_nodes)]


def _ancestors(parents, i):
    path = []
    while i >= 0:
        path.append(i)
        i = parents[i]
    return path[::-1]


@pytest.mark.parametrize("seed", range(4))
def test_random_chain_and_tree_patterns(lm, seed):
    rng = random.Random(seed)
    n_rows = 3
    texts = [[rng.randrange(lm.vocab_size) for _ in range(rng.randrange(1, 12))] for _ in range(n_rows)]
    cache = lm.new_cache(n_rows)
    lm.forward(cache, texts, logits="none")
    cache.commit_all()

    for _ in range(6):
        pattern = rng.choice(["chain", "multi_forward_chain", "tree", "rollback"])
        if pattern in ("chain", "multi_forward_chain"):
            fed = [[] for _ in range(n_rows)]
            for _ in range(1 if pattern == "chain" else rng.randrange(2, 4)):
                chunk = [[rng.randrange(lm.vocab_size) for _ in range(rng.randrange(0, 4))] for _ in range(n_rows)]
                lm.forward(cache, chunk, logits="none")
                for r in range(n_rows):
                    fed[r] += chunk[r]
            keep = [rng.randrange(len(f) + 1) for f in fed]
            cache.commit_prefix(keep)
            for r in range(n_rows):
                texts[r] += fed[r][: keep[r]]
        elif pattern == "tree":
            trees, tokens, positions, attend = [], [], [], []
            for r in range(n_rows):
                parents = _random_tree(rng, rng.randrange(1, 8))
                toks = [rng.randrange(lm.vocab_size) for _ in parents]
                depth = [len(_ancestors(parents, i)) - 1 for i in range(len(parents))]
                mask = torch.zeros(len(parents), len(parents), dtype=torch.bool)
                for i in range(len(parents)):
                    mask[i, _ancestors(parents, i)] = True
                trees.append(parents)
                tokens.append(toks)
                positions.append([len(texts[r]) + d for d in depth])
                attend.append(mask)
            out = lm.forward(cache, tokens, positions=positions, attend=attend)
            keep = []
            for r in range(n_rows):
                parents, toks = trees[r], tokens[r]
                for i in range(len(parents)):  # the tree mask gives each node exactly its path's logits
                    path = [toks[j] for j in _ancestors(parents, i)]
                    fresh = lm.full_logits(texts[r] + path)[-1]
                    assert (out.logits[r, i] - fresh).abs().max().item() < TOL
                leaf = rng.randrange(len(parents))
                path = _ancestors(parents, leaf)[: rng.randrange(len(_ancestors(parents, leaf)) + 1)]
                keep.append(path)
            cache.commit(keep)
            for r in range(n_rows):
                texts[r] += [tokens[r][i] for i in keep[r]]
        else:
            lm.forward(cache, [[rng.randrange(lm.vocab_size)] for _ in range(n_rows)], logits="none")
            cache.rollback()
        assert cache.lengths == [len(t) for t in texts]
        _check_rows(lm, cache, texts, rng)


def test_rows_leave_and_join(lm):
    rng = random.Random(7)
    texts = [[rng.randrange(lm.vocab_size) for _ in range(n)] for n in (3, 9, 5)]
    cache = lm.new_cache(3)
    lm.forward(cache, texts, logits="none")
    cache.commit_all()
    _check_rows(lm, cache, texts, rng)

    cache.select_rows([2, 0])  # row 1 finished
    texts = [texts[2], texts[0]]
    _check_rows(lm, cache, texts, rng)

    newcomers = [[rng.randrange(lm.vocab_size) for _ in range(n)] for n in (14, 1)]
    other = lm.new_cache(2)
    lm.forward(other, newcomers, logits="none")
    other.commit_all()
    cache.extend(other)
    texts += newcomers
    for _ in range(3):
        _check_rows(lm, cache, texts, rng)


def test_rows_churn_in_place(lm):
    """Requests finishing and joining every step (the Triton BLS rounds): survivors close the gaps in place and
    newcomers are copied into spare rows, so the batch's storage is reused, and every row still decodes like a
    fresh prefill, though slots past a row's length hold a departed row's entries."""
    rng = random.Random(11)

    def newcomers(lengths):
        texts = [[rng.randrange(lm.vocab_size) for _ in range(n)] for n in lengths]
        other = lm.new_cache(len(texts))
        lm.forward(other, texts, logits="none")
        other.commit_all()
        return texts, other

    texts, cache = newcomers([30, 4, 12, 7])
    _check_rows(lm, cache, texts, rng)
    storage = cache.buffer.untyped_storage().data_ptr()
    for joining in ([3, 40], [2, 9], [1, 1], [5, 5]):
        cache.select_rows([1, 3])  # rows 0 and 2 finished: 3 moves into 1's place over a longer row's entries
        texts = [texts[1], texts[3]]
        more, other = newcomers(joining)
        cache.extend(other)
        texts += more
        _check_rows(lm, cache, texts, rng)
        assert cache.buffer.untyped_storage().data_ptr() == storage  # no copy of the whole cache
    more, other = newcomers([300])  # longer than the cache's slots: it grows
    cache.extend(other)
    texts += more
    fresh = lm.new_cache(1)  # a newcomer whose cache holds nothing yet
    cache.extend(fresh)
    texts.append([])
    lm.forward(cache, [[] for _ in texts[:-1]] + [[5, 6, 7]], logits="none")
    cache.commit_all()
    texts[-1] = [5, 6, 7]
    for _ in range(2):
        _check_rows(lm, cache, texts, rng)
    cache.select_rows([3, 0])  # out of order: a gathered copy
    _check_rows(lm, cache, [texts[3], texts[0]], rng)


def test_commit_rejects_a_path_that_skips_positions(lm):
    cache = lm.new_cache(1)
    lm.forward(cache, [[1, 2, 3]], logits="none")
    cache.commit_all()
    lm.forward(cache, [[4, 5]], positions=[[3, 3]], attend=[torch.tensor([[1, 0], [0, 1]], dtype=torch.bool)])
    with pytest.raises(ValueError, match="position"):
        cache.commit([[1, 0]])  # both nodes sit at position 3: a sibling cannot follow its sibling


def test_plan_names_a_chain_of_positions_that_every_row_shares(lm):
    """ForwardPlan.chain_start (the lean RoPE then slices its table instead of gathering): set exactly when every
    row's positions run from one start; position_ids say the same either way."""
    cache = lm.new_cache(2)
    plan = cache.plan_forward([3, 3])
    assert plan.chain_start == 0 and plan.position_ids.tolist() == [[0, 1, 2], [0, 1, 2]]
    cache.commit_all()
    plan = cache.plan_forward([1, 0])  # row 1 pads: its query sits at the same slot
    assert plan.chain_start == 3 and plan.position_ids.tolist() == [[3], [3]]
    cache.rollback()
    plan = cache.plan_forward([2, 2], positions=[[3, 3], None])  # a tree row: no shared chain
    assert plan.chain_start is None and plan.position_ids.tolist() == [[3, 3], [3, 4]]
    cache.rollback()
    cache.plan_forward([1, 0])
    cache.commit_all()  # row 0 is one token ahead now
    plan = cache.plan_forward([1, 1])
    assert plan.chain_start is None and plan.position_ids.tolist() == [[4], [3]]


def test_additive_mask_is_float(lm):
    cache = lm.new_cache(2)
    plan = cache.plan_forward([2, 0])
    mask = plan.additive_mask(torch.float32)
    assert mask.dtype == torch.float32 and mask.shape == (2, 1, 2, 2)
    assert mask[0, 0, 0, 1] == torch.finfo(torch.float32).min and mask[0, 0, 1, 0] == 0


def test_batch_feed_with_a_token_tree(lm):
    """Batch.feed(parents=...) verifies a token tree in one forward; an accepted path is then committed."""
    from specbuild.reference.decoder.batch import Batch
    from specbuild.reference.decoder.request import Request
    from specbuild.reference.decoder.sequence import Sequence

    rng = random.Random(11)
    prompts = [[rng.randrange(lm.vocab_size) for _ in range(n)] for n in (4, 9)]
    batch = Batch([Sequence.start(i, Request(input_ids=p, max_new_tokens=20)) for i, p in enumerate(prompts)])
    batch.feed("target", lm, logits="none")
    batch.caches["target"].commit_all()
    for seq in batch.seqs:
        seq.tokens.append(rng.randrange(lm.vocab_size))  # the token the prefill produced: not cached yet

    parents = [[-1, -1, 0, 0, 2], [-1, 0, 1]]
    nodes = [[rng.randrange(lm.vocab_size) for _ in p] for p in parents]
    out = batch.feed("target", lm, nodes, parents=parents)
    keep = []
    for r, seq in enumerate(batch.seqs):
        for i in range(len(parents[r])):
            path, j = [], i
            while j >= 0:
                path.insert(0, nodes[r][j])
                j = parents[r][j]
            fresh = lm.full_logits(seq.tokens + path)[-1]
            assert (out.tail(r, len(nodes[r]) - i)[0] - fresh).abs().max().item() < TOL
        u = out.n_new[r] - len(nodes[r])
        keep.append(list(range(u)) + [u + i for i in ([0, 2, 4] if r == 0 else [0, 1])])
    batch.caches["target"].commit(keep)
    texts = [batch.seqs[0].tokens + [nodes[0][i] for i in (0, 2, 4)], batch.seqs[1].tokens + nodes[1][:2]]
    _check_rows(lm, batch.caches["target"], texts, rng)


def test_rows_rebuilt_from_kept_kv(lm):
    """KV reuse: a row's committed KV, cut to any prefix, starts a new cache that decodes like a fresh prefill."""
    from specbuild.reference.decoder.kv_cache import KVCache

    rng = random.Random(5)
    texts = [[rng.randrange(lm.vocab_size) for _ in range(n)] for n in (12, 7)]
    old = lm.new_cache(2)
    lm.forward(old, texts, logits="none")
    old.commit_all()
    kept = [old.row_kv(0), old.row_kv(1)]
    cache = KVCache.from_rows(lm.config, [(5, kept[0]), (0, None), (7, kept[1])])
    new_texts = [texts[0][:5] + [3, 4], [9, 9, 9], texts[1] + [1]]
    lm.forward(cache, [t[n:] for t, n in zip(new_texts, (5, 0, 7))], logits="none")  # the uncached rest
    cache.commit_all()
    _check_rows(lm, cache, new_texts, rng)
