"""Tree shapes (static trees from choices, parent lists, tries of sequences), tree attention masks, candidate
paths, and trees through the runtime (feed_trees / commit_paths). Acceptance is tested in test_acceptance.py."""

from __future__ import annotations

import pytest
import torch

from specbuild.errors import UserError
from specbuild.reference.decoder.tree import (
    Tree,
    chain_tree,
    check_choices,
    tree_from_choices,
    tree_from_parents,
    tree_from_sequences,
)

CHOICES = [[0], [1], [2], [0, 0], [0, 1], [1, 0], [0, 0, 0], [0, 1, 0], [0, 0, 1]]


def test_tree_from_choices_orders_by_depth_then_path_and_links_parents():
    tree = tree_from_choices(list(reversed(CHOICES)))  # input order must not matter
    assert tree.paths == ((), (0,), (1,), (2,), (0, 0), (0, 1), (1, 0), (0, 0, 0), (0, 0, 1), (0, 1, 0))
    for i in range(1, tree.size):
        assert tree.paths[tree.parents[i]] == tree.paths[i][:-1]
        assert tree.depths[i] == len(tree.paths[i])
    assert tree.num_draft_tokens == len(CHOICES)
    assert tree.max_depth == 3
    assert tree.children[0] == (1, 2, 3)


def test_candidate_paths_are_root_to_leaf_and_cover_every_leaf():
    tree = tree_from_choices(CHOICES)
    paths = tree.candidate_paths()
    leaf_choice_paths = {tree.paths[p[-1]] for p in paths}
    # a choice is a leaf when no other choice extends it
    expected = {tuple(c) for c in CHOICES if not any(len(d) > len(c) and d[: len(c)] == c for d in CHOICES)}
    assert leaf_choice_paths == expected
    for path in paths:
        assert path[0] == 0
        assert [tree.paths[n] for n in path] == [tree.paths[path[-1]][:k] for k in range(len(path))]


def test_attention_mask_allows_exactly_self_and_ancestors():
    tree = tree_from_choices(CHOICES)
    mask = tree.attention_mask(torch.float32)
    assert mask.dtype == torch.float32 and mask.shape == (tree.size, tree.size)
    for i in range(tree.size):
        for j in range(tree.size):
            ancestor_or_self = tree.paths[i][: len(tree.paths[j])] == tree.paths[j]  # prefix relation
            assert (mask[i, j] == 0) == ancestor_or_self
            if not ancestor_or_self:
                assert mask[i, j] == torch.finfo(torch.float32).min


def test_tree_forward_with_mask_equals_sequential_forward_of_each_path():
    """The additive mask + depth positions make one forward equal a plain forward of every candidate path."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.set_num_threads(1)
    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
    )
    model = LlamaForCausalLM(cfg).eval()
    tree = tree_from_choices(CHOICES)
    prompt = torch.randint(0, 64, (1, 9))
    tokens = torch.randint(0, 64, (tree.size,))
    with torch.no_grad():
        cache = model(prompt, use_cache=True).past_key_values
        past = prompt.shape[1]
        mask = torch.cat([torch.zeros(tree.size, past), tree.attention_mask(torch.float32)], dim=1)
        positions = torch.tensor(tree.position_offsets()) + past
        logits = model(tokens[None], cache=cache, attention_mask=mask[None, None], position_ids=positions[None]).logits[
            0
        ]
        for path in tree.candidate_paths():
            seq = torch.cat([prompt[0], tokens[list(path)]])[None]
            ref = model(seq).logits[0, -len(path) :]
            torch.testing.assert_close(logits[list(path)], ref, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    "choices, fragment",
    [
        ([], "non-empty list"),
        ([[0], [1, 0]], "no parent [1]"),
        ([[0], [0]], "repeats entry 0"),
        ([[0], [-1]], "negative index"),
        ([[0], []], "empty path"),
        ([[0], ["1"]], "integer top-k ranks"),
        ([[0], [0, 0], [0, 0, 0]], "depth 3 but only 2"),
        ([[0], [1], [2], [3]], "4 paths but max_draft_len is 3"),
    ],
)
def test_invalid_choices_raise_user_error_naming_the_field(choices, fragment):
    with pytest.raises(UserError) as info:
        tree_from_choices(choices, field_name="medusa_choices", max_draft_len=3, max_depth=2)
    assert "medusa_choices" in str(info.value) and fragment in str(info.value)


def test_choices_in_the_triton_parameter_format_are_read():
    assert tree_from_choices("{0}, {0, 0}, {1}").paths == ((), (0,), (1,), (0, 0))
    assert tree_from_choices("[[0], [1]]").size == 3
    with pytest.raises(UserError, match="medusa_choices"):
        tree_from_choices("{0}, {0", field_name="medusa_choices")
    assert check_choices([[0], [0, 0]], max_depth=2, max_draft_len=2) == []


def test_tree_from_parents_and_chain():
    tree = tree_from_parents([-1, 0, 0, 1, 1, 2])
    assert tree.depths == (0, 1, 1, 2, 2, 2)
    assert tree.paths[4] == (0, 1) and tree.paths[5] == (1, 0)
    with pytest.raises(ValueError):
        Tree(parents=(-1, 2, 0))
    chain = chain_tree(4)
    assert chain.parents == (-1, 0, 1, 2, 3) and chain.candidate_paths() == [(0, 1, 2, 3, 4)]


def test_tree_from_sequences_merges_shared_prefixes():
    tree, tokens = tree_from_sequences([[5, 6, 7], [5, 6, 8], [9, 1, 2], [5, 3, 3]])
    assert tree.num_draft_tokens == 9  # 5, 9 | 56, 91, 53 | 567, 568, 912, 533
    continuations = sorted(tuple(tokens[n] for n in path[1:]) for path in tree.candidate_paths())
    assert continuations == sorted([(5, 6, 7), (5, 6, 8), (9, 1, 2), (5, 3, 3)])
    for node in range(tree.size):  # no two siblings share a token
        kids = [tokens[c] for c in tree.children[node]]
        assert len(kids) == len(set(kids))


@pytest.mark.parametrize("uncached", [1, 3])
def test_feed_trees_and_commit_paths_match_plain_forwards(tmp_path, uncached):
    """Through the runtime's batch/cache: tree logits equal plain forwards of each path (also when several tokens
    before the root are uncached), and committing a path leaves the cache equal to a fresh prefill."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from tree_helpers import make_engine, save_random_llama

    from specbuild.reference.decoder.batch import Batch
    from specbuild.reference.decoder.request import Request
    from specbuild.reference.decoder.sequence import Sequence
    from specbuild.reference.decoder.tree import Acceptance, RowTree, commit_paths, feed_trees

    torch.set_num_threads(1)
    engine = make_engine(
        tmp_path / "e", save_random_llama(tmp_path / "m", vocab=64, hidden=32, layers=2, seed=0), "none"
    )
    model = engine.model
    tree = tree_from_choices(CHOICES)
    prompts = [[5, 9, 2, 7, 1, 3, 8], [4, 4, 6, 1, 2, 9, 9, 3, 5, 7, 2]]
    seqs = [Sequence.start(i, Request(input_ids=p, max_new_tokens=8)) for i, p in enumerate(prompts)]
    batch = Batch(seqs)
    cache = batch.cache("target", model)
    model.forward(cache, [p[:-uncached] for p in prompts], logits="none")
    cache.commit_all()
    gen = torch.Generator().manual_seed(0)
    drafts = [RowTree(tree, [p[-1]] + torch.randint(0, 64, (tree.size - 1,), generator=gen).tolist()) for p in prompts]
    out, roots = feed_trees(batch, model, drafts)
    assert roots == [uncached - 1] * 2
    for r, (p, d) in enumerate(zip(prompts, drafts)):
        for path in tree.candidate_paths():
            ref = model.full_logits(p + [d.tokens[n] for n in path[1:]])[-len(path) :]
            got = out.logits[r, [roots[r] + n for n in path]]
            torch.testing.assert_close(got, ref, atol=1e-4, rtol=1e-4)
    chosen = [tree.candidate_paths()[1], tree.candidate_paths()[-1]]
    accepted = [
        Acceptance(nodes=path[1:], tokens=tuple(d.tokens[n] for n in path[1:]), bonus=0)
        for path, d in zip(chosen, drafts)
    ]
    commit_paths(batch, roots, accepted)
    for r, (p, acc) in enumerate(zip(prompts, accepted)):
        text = p + list(acc.tokens)
        assert cache.lengths[r] == len(text)
        fresh = model.new_cache(1)
        model.forward(fresh, [text], logits="none")
        for mine, ref in zip(cache.store.layers, fresh.store.layers):
            torch.testing.assert_close(mine.keys[r, :, : len(text)], ref.keys[0], atol=1e-5, rtol=1e-5)
