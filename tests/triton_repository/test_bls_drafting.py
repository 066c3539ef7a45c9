"""The BLS's pure helpers (tensorrt_llm_bls/1/bls_drafting.py), imported the way the python backend does."""

from __future__ import annotations

import importlib.util

from specbuild.triton.repository import SOURCES

_spec = importlib.util.spec_from_file_location("bls_drafting", SOURCES / "tensorrt_llm_bls" / "bls_drafting.py")
drafting = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(drafting)


def test_prompt_lookup_copies_what_followed_the_last_ngram():
    tokens = [5, 6, 7, 8, 9, 1, 2, 5, 6]
    # the last bigram (5, 6) occurred at 0: what followed it is proposed
    assert drafting.prompt_lookup_drafts(tokens, 2, 3) == [7, 8, 9]
    assert drafting.prompt_lookup_drafts(tokens, 2, 10) == [7, 8, 9, 1, 2, 5, 6]


def test_prompt_lookup_prefers_longer_ngrams_then_the_latest_match():
    # trigram (1, 2, 3) matches at 0 -> 4; the bigram (2, 3) alone would match later at 5 -> 9
    tokens = [1, 2, 3, 4, 0, 2, 3, 9, 1, 2, 3]
    assert drafting.prompt_lookup_drafts(tokens, 3, 1) == [4]
    assert drafting.prompt_lookup_drafts(tokens, 2, 1) == [9]  # latest earlier occurrence of (2, 3)
    assert drafting.prompt_lookup_drafts([1, 2, 3], 2, 4) == []  # nothing repeats
    assert drafting.prompt_lookup_drafts([4, 4], 2, 4) == [4]  # unigram 4 at 0 is followed by 4
    assert drafting.prompt_lookup_drafts([1, 2, 1, 2], 2, 0) == []


def test_accepted_prefix_and_stop_words():
    assert drafting.accepted_prefix([1, 2, 3], [1, 2, 9, 4]) == 2
    assert drafting.accepted_prefix([1, 2], [1, 2, 3]) == 2
    assert drafting.accepted_prefix([1, 2], [7]) == 0
    assert drafting.accepted_prefix([], [7]) == 0
    assert drafting.ends_with_stop_word([4, 5, 6], [[9], [5, 6]])
    assert not drafting.ends_with_stop_word([4, 5, 6], [[4, 5], []])


def test_round_seeds_differ_per_round_and_model_and_repeat_per_request():
    seeds = {(r, s): drafting.round_seed(7, r, s) for r in range(50) for s in (1, 2)}
    assert len(set(seeds.values())) == len(seeds)
    assert drafting.round_seed(7, 3, 1) == seeds[(3, 1)]
    assert drafting.round_seed(8, 3, 1) != seeds[(3, 1)]
    assert all(0 <= v < 2 ** 63 for v in seeds.values())


def test_text_stream_deltas_concatenate_to_the_whole():
    # a byte-level decode where a two-byte character arrives split over two tokens
    pieces = {1: b"He", 2: b"llo ", 3: "é".encode()[:1], 4: "é".encode()[1:], 5: b"!"}

    def decode(tokens):
        return b"".join(pieces[t] for t in tokens).decode("utf-8", errors="replace")

    stream = drafting.TextStream(decode)
    deltas = [stream.push([1]), stream.push([1, 2, 3]), stream.push([1, 2, 3, 4]), stream.push([1, 2, 3, 4, 5])]
    assert deltas == ["He", "llo ", "é", "!"]  # the half character is held back, not sent as U+FFFD
    assert "".join(deltas) == decode([1, 2, 3, 4, 5])
    tail = drafting.TextStream(decode)
    assert tail.push([1, 3]) == "He" and tail.push([1, 3], final=True) == "\ufffd"  # flushed at the end
