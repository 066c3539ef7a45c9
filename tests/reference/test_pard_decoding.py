"""PARD decoding over the tiny zoo: the output is the target's greedy decoding token for token (any draft, trained or
not), batched rows decode as they do alone, and the zoo's trained PARD draft gets drafts accepted."""

from __future__ import annotations

import pytest
from specbuild.reference.decoder.model import CausalLM
from specbuild.methods.pard.decoder import draft_positions, pard_generate

torch = pytest.importorskip("torch")

PROMPTS = [
    "def parse(self, text):\n    ",
    "import os\nimport sys\n\nclass",
    "    for key, value in items():\n        if",
]


@pytest.fixture(scope="module")
def tiny(shipped_tiny):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(shipped_tiny / "tokenizer"))
    target = CausalLM.from_pretrained(shipped_tiny / "target")
    return tokenizer, target, [tokenizer(p)["input_ids"] for p in PROMPTS]


@pytest.fixture(scope="module")
def untrained_pard(shipped_tiny):
    """The zoo's AR draft with a mask token added and no PARD training: its parallel drafts are poor, which must
    not change the output."""
    from specbuild.zoo.distill_pard import add_mask_token
    from specbuild.zoo.quality import load_causal_lm

    model = load_causal_lm(shipped_tiny / "draft")
    mask = add_mask_token(model)
    return CausalLM(model), mask


def greedy(target: CausalLM, prompt: list[int], n: int) -> list[int]:
    tokens = list(prompt)
    for _ in range(n):
        tokens.append(int(target.full_logits(tokens)[-1].argmax()))
    return tokens[len(prompt) :]


def test_draft_positions_are_the_last_real_token_and_the_masks():
    assert draft_positions(5, 3) == slice(4, 7)
    assert draft_positions(1, 1) == slice(0, 1)


@pytest.mark.parametrize("k", [1, 4])
def test_output_is_the_targets_greedy_decoding(tiny, untrained_pard, k):
    _, target, prompts = tiny
    draft, mask = untrained_pard
    result = pard_generate(target, draft, prompts, max_new_tokens=20, max_draft_len=k, mask_token_id=mask)
    assert result.outputs == [greedy(target, p, 20) for p in prompts]
    assert all(d == k * s for d, s in zip(result.drafted, result.steps))


def test_batched_rows_decode_as_alone(tiny, untrained_pard):
    _, target, prompts = tiny
    draft, mask = untrained_pard
    together = pard_generate(target, draft, prompts, max_new_tokens=16, max_draft_len=3, mask_token_id=mask)
    alone = [pard_generate(target, draft, [p], max_new_tokens=16, max_draft_len=3, mask_token_id=mask) for p in prompts]
    assert together.outputs == [a.outputs[0] for a in alone]
    assert together.accepted == [a.accepted[0] for a in alone]


def test_end_token_stops_a_row(tiny, untrained_pard):
    _, target, prompts = tiny
    draft, mask = untrained_pard
    plain = greedy(target, prompts[0], 12)
    end = plain[5]
    result = pard_generate(
        target, draft, prompts[:1], max_new_tokens=12, max_draft_len=4, mask_token_id=mask, end_id=end
    )
    assert result.outputs[0] == plain[: plain.index(end) + 1]


def test_bad_arguments_are_refused(tiny, untrained_pard):
    _, target, prompts = tiny
    draft, _ = untrained_pard
    with pytest.raises(ValueError, match="max_draft_len"):
        pard_generate(target, draft, prompts, max_new_tokens=4, max_draft_len=0, mask_token_id=1)
    with pytest.raises(ValueError, match="outside the draft's vocabulary"):
        pard_generate(target, draft, prompts, max_new_tokens=4, max_draft_len=2, mask_token_id=draft.vocab_size)


def test_the_zoos_pard_draft_is_lossless_and_accepted(tiny, shipped_tiny):
    import json

    if not (shipped_tiny / "pard").is_dir():
        pytest.skip(f"{shipped_tiny} has no pard/ stage")
    _, target, prompts = tiny
    draft = CausalLM.from_pretrained(shipped_tiny / "pard")
    mask = json.loads((shipped_tiny / "pard" / "config.json").read_text())["pard_token"]
    result = pard_generate(target, draft, prompts, max_new_tokens=24, max_draft_len=4, mask_token_id=mask)
    assert result.outputs == [greedy(target, p, 24) for p in prompts]
    # trained to draft in parallel: more than one token per verification step on these prompts
    assert sum(result.accepted) > 0
    assert (sum(result.accepted) + sum(result.steps)) / sum(result.steps) > 1.5
