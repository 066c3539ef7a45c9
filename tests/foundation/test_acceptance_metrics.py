from specbuild.facts.metrics import acceptance_rate, mean_acceptance_length


def test_acceptance_length_counts_the_bonus_token():
    # 3 verification steps that accepted 2, 0 and 4 draft tokens yield 3, 1 and 5 tokens.
    assert mean_acceptance_length(accepted_draft_tokens=6, steps=3) == (3 + 1 + 5) / 3
    assert mean_acceptance_length(0, 5) == 1.0
    assert mean_acceptance_length(0, 0) == 0.0


def test_acceptance_rate():
    assert acceptance_rate(6, 12) == 0.5
    assert acceptance_rate(0, 0) == 0.0
