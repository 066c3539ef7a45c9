"""Prompt-lookup drafting, defined once (specbuild/standalone/prompt_lookup_drafts.py; the BLS's copy is checked in
tests/triton_repository/test_bls_drafting.py): the longest matching n-gram, then its oldest occurrence, as
TensorRT-LLM's NGram pool serves with is_keep_all and is_use_oldest."""

from __future__ import annotations

import random

from specbuild.standalone.prompt_lookup_drafts import propose


def test_copies_what_followed_the_last_ngram():
    tokens = [5, 6, 7, 8, 9, 1, 2, 5, 6]
    # the last bigram (5, 6) occurred at 0: what followed it is proposed
    assert propose(tokens, 2, 3) == [7, 8, 9]
    assert propose(tokens, 2, 10) == [7, 8, 9, 1, 2, 5, 6]


def test_prefers_longer_ngrams_then_the_oldest_occurrence():
    # trigram (1, 2, 3) matches at 0 -> 4; the bigram (2, 3) alone matches at 1 -> 4 and at 5 -> 9
    tokens = [1, 2, 3, 4, 0, 2, 3, 9, 1, 2, 3]
    assert propose(tokens, 3, 1) == [4]
    assert propose([0, *tokens], 2, 2) == [4, 0]  # the oldest of (2, 3)'s occurrences, not the latest (9, 1)
    # (5, 6) at 0 is followed by 7 8 9, at 5 by 3 5 6: the oldest wins even where the latest is as long
    assert propose([5, 6, 7, 8, 9, 5, 6, 3, 5, 6], 2, 3) == [7, 8, 9]
    assert propose([1, 2, 3], 2, 4) == []  # nothing repeats
    assert propose([4, 4], 2, 4) == [4]  # unigram 4 at 0 is followed by 4
    assert propose([1, 2, 1, 2], 2, 0) == []


def _pool_drafts(sequence, max_ngram, k):
    """TensorRT-LLM's NGram pool with its defaults (is_keep_all, is_use_oldest; one request), fed the sequence one
    token at a time as decoding would (the pool's update and lookup as tensorrt_llm/_torch/speculative/ngram.py
    `NGramPoolManager.get_draft_tokens` describes them, written out for this test): the drafts proposed after each
    prefix of length >= 2."""
    pool, start_index, proposed = {}, 0, []
    for end in range(2, len(sequence) + 1):
        prefix = sequence[:end]
        window = prefix[start_index:]
        for size in range(min(max_ngram, end - 1), 0, -1):
            for left in range(len(window) - size):
                pattern = tuple(window[left : left + size])
                match = tuple(window[left + size : min(left + size + k, len(window))])
                if pattern not in pool:
                    pool[pattern] = [match]
                elif match not in pool[pattern]:
                    pool[pattern] = [m for m in pool[pattern] if len(m) >= len(match)] + [match]
        drafts = []
        for size in range(min(max_ngram, end - 1), 0, -1):
            if tuple(prefix[-size:]) in pool:
                drafts = list(pool[tuple(prefix[-size:])][0])
                break
        start_index = max(0, end - (k + max_ngram - 1))
        proposed.append(drafts)
    return proposed


def test_proposes_what_the_ngram_pool_serves_step_by_step():
    rng = random.Random(3)
    for trial in range(200):
        sequence = [rng.randrange(4) for _ in range(rng.randrange(2, 40))]
        max_ngram, k = rng.randrange(1, 4), rng.randrange(1, 6)
        want = _pool_drafts(sequence, max_ngram, k)
        got = [propose(sequence[:end], max_ngram, k) for end in range(2, len(sequence) + 1)]
        assert got == want, (trial, sequence, max_ngram, k)
