"""Prompt-lookup drafting, defined once (specbuild/prompt_lookup_drafts.py; the BLS's copy is checked in
tests/triton_repository/test_bls_drafting.py)."""

from __future__ import annotations

from specbuild.prompt_lookup_drafts import propose


def test_copies_what_followed_the_last_ngram():
    tokens = [5, 6, 7, 8, 9, 1, 2, 5, 6]
    # the last bigram (5, 6) occurred at 0: what followed it is proposed
    assert propose(tokens, 2, 3) == [7, 8, 9]
    assert propose(tokens, 2, 10) == [7, 8, 9, 1, 2, 5, 6]


def test_prefers_longer_ngrams_then_the_latest_match():
    # trigram (1, 2, 3) matches at 0 -> 4; the bigram (2, 3) alone would match later at 5 -> 9
    tokens = [1, 2, 3, 4, 0, 2, 3, 9, 1, 2, 3]
    assert propose(tokens, 3, 1) == [4]
    assert propose(tokens, 2, 1) == [9]  # latest earlier occurrence of (2, 3)
    assert propose([1, 2, 3], 2, 4) == []  # nothing repeats
    assert propose([4, 4], 2, 4) == [4]  # unigram 4 at 0 is followed by 4
    assert propose([1, 2, 1, 2], 2, 0) == []
