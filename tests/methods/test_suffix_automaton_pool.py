"""The pool of suffix automata: per request, and the global pool every request searches (longest match across the
pool, capped at 64 tokens; finished requests kept until the pool is full, oldest evicted first; the slot limits)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specbuild.methods.suffix_automaton.automaton import LONGEST, NO_DRAFT, Draft
from specbuild.methods.suffix_automaton.pool import (
    GLOBAL_MATCH_CAP,
    MAX_SLOTS,
    SuffixAutomatonPool,
    default_pool_size,
    pool_problems,
)

from suffix_brute_force import brute_longest_earlier, brute_match_in


def brute_global(own, others, k, cap=GLOBAL_MATCH_CAP):
    """Own text first, then the others in pool order; a longer match wins, ties keep the earlier candidate."""
    best_len, best = 0, NO_DRAFT
    m = brute_longest_earlier(own, cap=cap)
    if m is not None:
        best_len, best = m.length, Draft(m.length, tuple(own[m.start : m.start + k]))
    pattern = own[-cap:]
    for other in others:
        m = brute_match_in(other, pattern)
        if m is not None and m.length > best_len:
            best_len, best = m.length, Draft(m.length, tuple(other[m.start : m.start + k]))
    return best


@settings(max_examples=80, deadline=None)
@given(st.lists(st.lists(st.integers(0, 3), max_size=30), min_size=1, max_size=5), st.integers(1, 4))
def test_global_pool_draft_is_the_longest_match_across_the_pool(texts, k):
    pool = SuffixAutomatonPool(max_batch_size=8, enable_global_pool=True)
    for rid, text in enumerate(texts):
        pool.start(rid, text)
    own, others = texts[-1], texts[:-1]
    assert pool.draft(len(texts) - 1, k) == brute_global(own, others, k)


def test_other_requests_text_is_drafted_from_only_with_the_global_pool():
    shared = [7, 8, 9, 10, 11]
    for global_pool, expected in ((False, NO_DRAFT), (True, Draft(3, (10, 11)))):
        pool = SuffixAutomatonPool(max_batch_size=4, enable_global_pool=global_pool)
        pool.start(1, shared)
        pool.start(2, [1, 7, 8, 9])
        assert pool.draft(2, 4) == expected


def test_matches_are_capped_at_64_tokens_with_the_global_pool():
    text = list(range(100)) + list(range(100))  # the whole first half repeats: a 100-token earlier suffix
    alone = SuffixAutomatonPool(max_batch_size=1)
    alone.start(1, text)
    assert alone.draft(1, 2).match_length == 100
    shared = SuffixAutomatonPool(max_batch_size=1, enable_global_pool=True)
    shared.start(1, text)
    assert shared.draft(1, 2) == Draft(GLOBAL_MATCH_CAP, (0, 1))


def test_finished_requests_stay_until_the_pool_is_full_then_the_oldest_goes():
    pool = SuffixAutomatonPool(max_batch_size=2, enable_global_pool=True, global_pool_size=3)
    for rid in (1, 2, 3):
        pool.start(rid, [rid, rid + 10, rid + 20])
    pool.finish(2)
    pool.finish(1)
    pool.start(4, [4])  # full: the oldest finished request (1, which entered first) is evicted
    assert pool.held() == [2, 3, 4]
    pool.finish(3)
    pool.start(5, [5])  # 2 is now the oldest finished request
    assert pool.held() == [3, 4, 5]
    assert pool.active() == [4, 5]
    pool.start(6, [6])  # 3 finished: evicted, not refused
    assert pool.held() == [4, 5, 6]
    with pytest.raises(RuntimeError, match="no free suffix-automaton slot"):
        pool.start(7, [7])  # every slot is a request in flight


def test_a_pool_of_requests_in_flight_refuses_one_more():
    pool = SuffixAutomatonPool(max_batch_size=2)
    pool.start(1, [1])
    pool.start(2, [2])
    with pytest.raises(RuntimeError, match="no free suffix-automaton slot"):
        pool.start(3, [3])
    pool.finish(1)  # without the global pool a finished request frees its slot at once
    pool.start(3, [3])
    assert pool.held() == [2, 3]


def test_extend_grows_the_request_text_and_its_drafts():
    pool = SuffixAutomatonPool(max_batch_size=1, max_matching_ngram_size=2)
    pool.start(1, [1, 2, 3, 4])
    assert pool.draft(1, 3) == NO_DRAFT
    pool.extend(1, [1, 2])
    assert pool.draft(1, 3) == Draft(2, (3, 4, 1))
    with pytest.raises(KeyError):
        pool.extend(9, [1])


def test_the_pool_follows_sa_decoding_config_rules():
    assert default_pool_size(8) == 64 and default_pool_size(100) == 100
    assert (
        pool_problems(enable_global_pool=False, global_pool_size=None, max_batch_size=8, max_matching_ngram_size=-1)
        == []
    )
    fields = lambda **kw: [f for f, _ in pool_problems(**kw)]  # noqa: E731
    assert fields(enable_global_pool=False, global_pool_size=None, max_batch_size=8, max_matching_ngram_size=0) == [
        "max_matching_ngram_size"
    ]
    assert fields(enable_global_pool=False, global_pool_size=80, max_batch_size=8, max_matching_ngram_size=3) == [
        "global_pool_size"
    ]
    assert fields(enable_global_pool=True, global_pool_size=None, max_batch_size=8, max_matching_ngram_size=65) == [
        "max_matching_ngram_size"
    ]
    assert fields(enable_global_pool=True, global_pool_size=4, max_batch_size=8, max_matching_ngram_size=-1) == [
        "global_pool_size"
    ]
    assert fields(
        enable_global_pool=True, global_pool_size=MAX_SLOTS + 1, max_batch_size=8, max_matching_ngram_size=LONGEST
    ) == ["global_pool_size"]
    with pytest.raises(ValueError, match="global_pool_size"):
        SuffixAutomatonPool(max_batch_size=8, enable_global_pool=True, global_pool_size=4)
