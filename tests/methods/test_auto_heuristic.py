"""AUTO's choice, as TensorRT-LLM's auto_heuristic.py@f00d21a makes it: from max_batch_size, off above 32 in flight."""

from __future__ import annotations

import pytest

from specbuild.methods.auto.heuristic import AutoChoice, speculates, suggest


@pytest.mark.parametrize("max_batch_size, drafts, ngram", [(1, 5, 3), (4, 5, 3), (5, 3, 5), (32, 3, 5), (2048, 3, 5)])
def test_the_choice_follows_max_batch_size(max_batch_size, drafts, ngram):
    choice = suggest(max_batch_size)
    assert (choice.max_draft_len, choice.max_matching_ngram_size, choice.max_concurrency) == (drafts, ngram, 32)
    assert choice.is_keep_all and choice.is_use_oldest and choice.is_public_pool


def test_speculation_is_off_above_32_requests_in_flight():
    choice = suggest(64)
    assert speculates(choice, 32) and not speculates(choice, 33)
    assert "off above 32" in choice.describe()
    with pytest.raises(ValueError):
        suggest(0)
    assert AutoChoice(5, 3) == suggest(2)
