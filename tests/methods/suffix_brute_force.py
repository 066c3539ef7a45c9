"""Brute-force references for the suffix automaton tests: every occurrence compared token by token."""

from __future__ import annotations

from specbuild.methods.suffix_automaton.automaton import Match


def occurrences(text, pattern, last_end):
    """End positions of `pattern` in `text`, at most `last_end`, earliest first."""
    n = len(pattern)
    return [e for e in range(n - 1, last_end + 1) if text[e - n + 1 : e + 1] == list(pattern)]


def brute_longest_earlier(text, cap=None):
    size = len(text)
    top = size - 1 if cap is None else min(size - 1, cap)
    for length in range(top, 0, -1):
        ends = occurrences(text, text[size - length :], size - 2)
        if ends:
            return Match(length, ends[0] + 1)
    return None


def brute_fixed(text, n):
    size = len(text)
    if n <= 0 or size < n + 1:
        return None
    ends = occurrences(text, text[size - n :], size - 2)
    return Match(n, ends[0] + 1) if ends else None


def brute_match_in(other, pattern):
    for length in range(len(pattern), 0, -1):
        ends = occurrences(other, pattern[len(pattern) - length :], len(other) - 2)
        if ends:
            return Match(length, ends[0] + 1)
    return None
