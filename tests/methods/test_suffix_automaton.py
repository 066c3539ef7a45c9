"""The suffix automaton against brute force: the longest suffix that occurred earlier (and the fixed n-gram), at its
first occurrence, on every prefix of random texts; its size stays linear; drafting and the sa_config enhancer."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specbuild.methods.suffix_automaton.automaton import (
    LONGEST,
    NO_DRAFT,
    Draft,
    Match,
    SuffixAutomaton,
    enhance,
)

from suffix_brute_force import brute_fixed, brute_longest_earlier, brute_match_in

# small alphabets make repeats (and long matches) common
texts = st.lists(st.integers(0, 3), max_size=60)
wide_texts = st.lists(st.integers(0, 40), max_size=60)


@settings(max_examples=150, deadline=None)
@given(texts)
def test_longest_earlier_suffix_is_brute_force_on_every_prefix(text):
    sa = SuffixAutomaton()
    for i, token in enumerate(text):
        sa.append(token)
        assert sa.longest_earlier_suffix() == brute_longest_earlier(text[: i + 1])


@settings(max_examples=100, deadline=None)
@given(texts, st.integers(1, 6))
def test_capped_and_fixed_lookups_are_brute_force(text, n):
    sa = SuffixAutomaton(text)
    assert sa.longest_earlier_suffix(cap=n) == brute_longest_earlier(text, cap=n)
    assert sa.earlier_suffix_of_length(n) == brute_fixed(text, n)


@settings(max_examples=100, deadline=None)
@given(wide_texts, texts)
def test_longest_match_of_another_text_is_brute_force(other, pattern):
    sa = SuffixAutomaton(other)
    assert sa.longest_match_of(pattern) == brute_match_in(other, pattern)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 200), max_size=200))
def test_states_and_transitions_stay_linear(text):
    sa = SuffixAutomaton(text)
    n = len(text)
    assert sa.num_states <= max(n + 1, 2 * n - 1)  # root included; 2n - 1 for n >= 2
    if n >= 3:
        assert sa.num_transitions <= 3 * n - 4


@settings(max_examples=100, deadline=None)
@given(texts, st.integers(1, 5), st.integers(1, 4))
def test_draft_follows_the_match(text, k, ngram):
    sa = SuffixAutomaton(text)
    longest = sa.draft(k, LONGEST)
    expected = brute_longest_earlier(text)
    if expected is None:
        assert longest == NO_DRAFT
    else:
        assert longest == Draft(expected.length, tuple(text[expected.start : expected.start + k]))
        assert 1 <= len(longest.tokens) <= k
    fixed = sa.draft(k, ngram)
    sizes = [m for m in (brute_fixed(text, s) for s in range(ngram, 0, -1)) if m is not None]
    if not sizes:
        assert fixed == NO_DRAFT
    else:  # the largest size from n down to 1 that matches (suffixAutomatonExtendNgramKernel)
        assert fixed == Draft(sizes[0].length, tuple(text[sizes[0].start : sizes[0].start + k]))


def test_the_first_occurrence_is_drafted_from():
    # "1 2" occurs at 0-1 and 3-4; the text ends with "1 2": the continuation is that of the first one (9, then 1)
    sa = SuffixAutomaton([1, 2, 9, 1, 2, 7, 1, 2])
    assert sa.longest_earlier_suffix() == Match(2, 2)
    assert sa.draft(3) == Draft(2, (9, 1, 2))


def test_a_match_longer_than_the_continuation_drafts_what_there_is():
    sa = SuffixAutomaton([5, 6, 5, 6])
    assert sa.draft(4) == Draft(2, (5, 6))


def test_zero_ngram_size_is_refused():
    with pytest.raises(ValueError, match="must be > 0"):
        SuffixAutomaton([1, 1]).draft(3, 0)


def test_enhancer_overrides_from_the_threshold_on():
    neural = (10, 11, 12)
    assert enhance(neural, Draft(4, (1, 2, 3, 4)), threshold=4) == (1, 2, 3)
    assert enhance(neural, Draft(3, (1, 2, 3)), threshold=4) == neural
    assert enhance(neural, Draft(6, (1,)), threshold=4) == (1,)
    assert enhance(neural, NO_DRAFT, threshold=1) == neural
    with pytest.raises(ValueError):
        enhance(neural, NO_DRAFT, threshold=0)
