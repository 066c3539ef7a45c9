"""What a PARD draft must be for its target: the mask token TensorRT-LLM picks (pard_token, mask_token_id,
vocab_size, or the speculative_config override) inside the draft's embedding, and the target's vocabulary plus at
most that one id; the zoo's tiny PARD draft passes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specbuild.methods.pard.checkpoint import mask_token_id, pard_problems

TINY = Path(__file__).resolve().parents[2] / "checkpoints" / "tiny"
TARGET = {"vocab_size": 4096}


def test_the_mask_token_falls_back_as_tensorrt_llm_does():
    assert mask_token_id({"pard_token": 7, "mask_token_id": 8, "vocab_size": 9}) == (7, "config.json pard_token")
    assert mask_token_id({"mask_token_id": 8, "vocab_size": 9}) == (8, "config.json mask_token_id")
    assert mask_token_id({"vocab_size": 9}) == (9, "config.json vocab_size")
    assert mask_token_id({"pard_token": 7}, override=3) == (3, "speculative_config.mask_token_id")


def test_an_extra_mask_id_after_the_targets_vocabulary_passes():
    assert pard_problems({"vocab_size": 4097, "pard_token": 4096}, TARGET) == []


def test_an_unused_id_of_a_shared_vocabulary_passes():
    assert pard_problems({"vocab_size": 4096, "pard_token": 4000}, TARGET) == []


@pytest.mark.parametrize(
    "draft, words",
    [
        (
            {"vocab_size": 4097},
            "outside the draft's 4097 embedding rows: every PARD step feeds it to the draft — add pard_token",
        ),
        ({"vocab_size": 4097, "pard_token": 5000}, "outside the draft's 4097 embedding rows"),
        ({"vocab_size": 4097, "pard_token": 17}, "not that extra id 4096"),
        ({"vocab_size": 4100, "pard_token": 4096}, "the draft's vocabulary has 4100 ids, the target's 4096"),
        ({"vocab_size": 2048, "pard_token": 1}, "the draft's vocabulary has 2048 ids"),
        ({"pard_token": 1}, "lacks vocab_size"),
    ],
)
def test_what_cannot_serve_is_named(draft, words):
    problems = pard_problems(draft, TARGET)
    assert problems and words in " ".join(problems)


def test_larger_embedding_and_draft_length():
    # a mask at vocab_size fits when the weights hold one more row than the config says
    assert pard_problems({"vocab_size": 4096}, TARGET, embedding_rows=4097) == []
    assert "max_draft_len is 0" in pard_problems({"vocab_size": 4097, "pard_token": 4096}, TARGET, max_draft_len=0)[0]


@pytest.mark.skipif(not (TINY / "pard" / "config.json").is_file(), reason="the zoo has no pard/ stage")
def test_the_zoos_pard_draft_passes_for_its_target():
    draft = json.loads((TINY / "pard" / "config.json").read_text())
    target = json.loads((TINY / "target" / "config.json").read_text())
    assert pard_problems(draft, target, max_draft_len=4) == []
    assert draft["pard_token"] == target["vocab_size"] == draft["vocab_size"] - 1
