"""The sampling transforms on hand-computed examples, and bad-word masks inside a draft."""

from __future__ import annotations

import math

import pytest
import torch

from specbuild.reference.decoder import sampling
from specbuild.reference.decoder.request import Request
from specbuild.reference.decoder.sampling import SamplingConfig
from specbuild.reference.decoder.sequence import Sequence

LOGITS = torch.log(torch.tensor([0.1, 0.4, 0.2, 0.3]))


def test_temperature_one_is_softmax():
    assert torch.allclose(
        sampling.probabilities(LOGITS, SamplingConfig(temperature=1.0)), torch.tensor([0.1, 0.4, 0.2, 0.3])
    )


def test_temperature_sharpens():
    got = sampling.probabilities(LOGITS, SamplingConfig(temperature=0.5))
    squares = torch.tensor([0.01, 0.16, 0.04, 0.09])
    assert torch.allclose(got, squares / squares.sum())


def test_top_k():
    got = sampling.probabilities(LOGITS, SamplingConfig(temperature=1.0, top_k=2))
    assert torch.allclose(got, torch.tensor([0.0, 0.4, 0.0, 0.3]) / 0.7)


@pytest.mark.parametrize(
    "top_p, kept", [(0.39, [1]), (0.41, [1, 3]), (0.69, [1, 3]), (0.71, [1, 3, 2]), (1.0, [0, 1, 2, 3])]
)
def test_top_p_keeps_the_smallest_set_reaching_p(top_p, kept):
    got = sampling.probabilities(LOGITS, SamplingConfig(temperature=1.0, top_p=top_p))
    base = torch.tensor([0.1, 0.4, 0.2, 0.3])
    expected = torch.zeros(4)
    expected[kept] = base[kept] / base[kept].sum()
    assert torch.allclose(got, expected, atol=1e-6)


def test_top_k_then_top_p_batched():
    logits = torch.stack([LOGITS, LOGITS.flip(0)])
    got = sampling.probabilities(logits, SamplingConfig(temperature=1.0, top_k=3, top_p=0.5))
    # top-3 of row 0: 0.4, 0.3, 0.2 -> renormalised 0.444, 0.333, 0.222 -> top-p 0.5 keeps 0.444 and 0.333
    assert torch.allclose(got[0], torch.tensor([0.0, 4 / 7, 0.0, 3 / 7]), atol=1e-6)
    assert torch.allclose(got[1], got[0].flip(0), atol=1e-6)


def test_greedy_is_one_hot_argmax():
    for cfg in (SamplingConfig(), SamplingConfig(temperature=0.7, top_k=1)):
        assert cfg.greedy
        assert sampling.probabilities(LOGITS, cfg).tolist() == [0.0, 1.0, 0.0, 0.0]


def test_residual():
    p = torch.tensor([0.5, 0.3, 0.2])
    q = torch.tensor([0.2, 0.6, 0.2])
    assert torch.allclose(sampling.residual(p, q), torch.tensor([1.0, 0.0, 0.0]))
    assert torch.equal(sampling.residual(p, p), p)


def test_sampling_config_problems():
    assert SamplingConfig(temperature=-1.0, top_k=-1, top_p=1.5).problems() and not SamplingConfig().problems()
    assert math.isclose(SamplingConfig(temperature=0.5).temperature, 0.5)


def _seq(tokens, **kw):
    return Sequence.start(1, Request(input_ids=tokens, max_new_tokens=10, **kw))


def test_bad_words_mask_depends_on_the_context_inside_the_draft():
    seq = _seq([7], bad_words=[[2, 3]])  # 3 is banned right after 2
    logits = torch.zeros(3, 5)
    logits[:, 3] = 5.0
    masked = seq.mask_bad_words(logits, [2, 1])
    assert masked[0, 3] == 5.0 and masked[1, 3] == float("-inf") and masked[2, 3] == 5.0
    assert seq.choose(logits[0], [2]) != 3 and seq.choose(logits[0], []) == 3
