"""The acceptance core shared by chains and trees (specbuild.reference.decoder.acceptance, used through verify.py).

Greedy: the accepted path is the longest one matching the target's argmax (brute force over candidate paths); a
chain keeps its matching prefix. Recursive (multi-candidate) rejection sampling preserves the target distribution.
Two kinds of evidence:
1. exact enumeration: for one node, summing over every way the candidates can be drawn and every
   accept/reject outcome gives back exactly the target distribution p (deterministic candidates,
   draws without replacement, i.i.d. draws) -- and three plausible-looking wrong variants do not;
   it also shows that point-mass proposals (ignore q) are lossless for any independently drawn candidates;
2. Monte Carlo: the full `sample_accept` run as a decoding loop over a synthetic two-level "model" emits
   first-two-token pairs whose histogram matches p(t1) p(t2 | t1) (chi-square), and the same harness
   rejects a deliberately broken residual; the same harness checks chains with sampled drafts through
   `verify_chain` (the draft-target path), so chain and tree rules cannot drift apart.
"""

from __future__ import annotations

import itertools
import math
import random

import pytest
import torch

import specbuild.reference.decoder.acceptance as acceptance
from specbuild.reference.decoder.acceptance import accept_or_residual as _accept_or_residual
from specbuild.reference.decoder.acceptance import greedy_accept, sample_accept
from specbuild.reference.decoder.request import Request
from specbuild.reference.decoder.sampling import SamplingConfig
from specbuild.reference.decoder.sequence import Sequence
from specbuild.reference.decoder.tree import Tree, tree_from_choices, tree_from_parents
from specbuild.reference.decoder.verify import verify_chain

torch.set_num_threads(1)
DOUBLE = torch.float64


def chi_square_pvalue(observed: torch.Tensor, expected: torch.Tensor, min_expected: float = 5.0) -> float:
    """Pearson chi-square goodness of fit; cells with expected count < min_expected are pooled."""
    observed, expected = observed.to(DOUBLE).flatten(), expected.to(DOUBLE).flatten()
    small = expected < min_expected
    obs = torch.cat([observed[~small], observed[small].sum()[None]])
    exp = torch.cat([expected[~small], expected[small].sum()[None]])
    keep = exp > 0
    obs, exp = obs[keep], exp[keep]
    stat = float(((obs - exp) ** 2 / exp).sum())
    df = len(exp) - 1
    return float(torch.special.gammaincc(torch.tensor(df / 2, dtype=DOUBLE), torch.tensor(stat / 2, dtype=DOUBLE)))


# ---------------------------------------------------------------- greedy


def _brute_force_greedy_length(tree: Tree, tokens, argmax) -> int:
    """Independent check: over every candidate path, the longest prefix that matches the target's argmax."""
    best = 0
    for path in tree.candidate_paths():
        n = 0
        while n + 1 < len(path) and tokens[path[n + 1]] == argmax[path[n]]:
            n += 1
        best = max(best, n)
    return best


def test_greedy_accept_matches_brute_force_on_random_trees():
    rng = random.Random(1)
    for trial in range(400):
        size = rng.randint(1, 14)
        parents = [-1] + [rng.randrange(i) for i in range(1, size)]
        # re-order by depth is not required for correctness of verification; parents[i] < i suffices
        tree = tree_from_parents(parents)
        vocab = rng.choice([2, 3, 5])  # tiny vocab: many matches, duplicated sibling tokens
        tokens = [rng.randrange(vocab) for _ in range(size)]
        argmax = [rng.randrange(vocab) for _ in range(size)]
        result = greedy_accept(tree, tokens, argmax)
        assert len(result.nodes) == _brute_force_greedy_length(tree, tokens, argmax)
        # the accepted tokens are exactly what greedy decoding emits: each equals the argmax at its parent
        prev = 0
        for node in result.nodes:
            assert tree.parents[node] == prev and tokens[node] == argmax[prev]
            prev = node
        assert result.bonus == argmax[prev]
        assert result.new_tokens == [tokens[n] for n in result.nodes] + [argmax[prev]]


def test_greedy_accept_with_no_match_returns_only_the_bonus():
    tree = tree_from_choices([[0], [1]])
    result = greedy_accept(tree, tokens=[9, 3, 4], target_argmax=[7, 1, 1])
    assert result.nodes == () and result.bonus == 7 and result.new_tokens == [7]


def _seq(tokens, **kw):
    return Sequence.start(1, Request(input_ids=tokens, max_new_tokens=10, **kw))


def _chain(seq, logits, drafts, q=None):
    """verify_chain's (emitted tokens, accepted drafts)."""
    acceptance = verify_chain(seq, logits, drafts, q)
    return acceptance.new_tokens, len(acceptance.nodes)


def test_verify_chain_greedy_compares_tokens():
    seq = _seq([0])
    logits = torch.full((4, 5), -5.0)
    for i, t in enumerate([2, 3, 1, 4]):  # the target's argmax at each position
        logits[i, t] = 5.0
    assert _chain(seq, logits, [2, 3, 1]) == ([2, 3, 1, 4], 3)  # all accepted + bonus
    assert _chain(seq, logits, [2, 0, 1]) == ([2, 3], 1)  # correction at the first mismatch
    assert _chain(seq, logits[:1], []) == ([2], 0)


def test_greedy_chain_respects_bad_words_in_the_draft_context():
    """Bad words are masked given each position's own context (tokens + drafts so far) in chains too."""
    seq = _seq([0], bad_words=[[2, 3]])  # 3 is banned right after 2
    logits = torch.full((3, 5), -5.0)
    logits[0, 2] = 5.0
    logits[1, 3], logits[1, 1] = 5.0, 4.0  # after the draft 2, the argmax 3 is banned: 1 instead
    logits[2, 4] = 5.0
    assert _chain(seq, logits, [2, 3]) == ([2, 1], 1)
    assert _chain(seq, logits, [2, 1]) == ([2, 1, 4], 2)


# ---------------------------------------------------------------- exact enumeration at one node


def _output_distribution(p, draws, step):
    """Exact output distribution of the recursive scheme, for a list of (weight, [(token, q_i), ...])."""
    out = torch.zeros_like(p)
    for weight, candidates in draws:
        remaining, cur = weight, p
        for token, q in candidates:
            accept, residual = step(cur, token, q)
            out[token] += remaining * accept
            remaining *= 1.0 - accept
            cur = residual
        out += remaining * cur
    return out


def _draws_deterministic(tokens):
    return [(1.0, [(t, None) for t in tokens])]


def _draws_without_replacement(q, k):
    draws = []
    for seq in itertools.permutations(range(len(q)), k):
        weight, cur, cands = 1.0, q.clone(), []
        for t in seq:
            weight *= float(cur[t])
            cands.append((t, cur.clone()))
            cur[t] = 0.0
            cur = cur / cur.sum()
        draws.append((weight, cands))
    return draws


def _draws_iid(q, k):
    return [
        (math.prod(float(q[t]) for t in seq), [(t, q) for t in seq])
        for seq in itertools.product(range(len(q)), repeat=k)
    ]


def _random_dist(gen, vocab, sharp):
    return torch.softmax(torch.randn(vocab, generator=gen, dtype=DOUBLE) * sharp, dim=0)


def _forget_removal(p, token, q):  # wrong: on rejection keep sampling from p (no residual)
    accept, _ = _accept_or_residual(p, token, q)
    return accept, p


def _as_if_deterministic(p, token, q):  # valid (lower acceptance): any candidate may be treated as fixed
    return _accept_or_residual(p, token, None)


def _ratio_accept_point_residual(p, token, q):  # wrong: accept with min(1, p/q) but remove only x on rejection
    accept, _ = _accept_or_residual(p, token, q)
    _, residual = _accept_or_residual(p, token, None)
    return accept, residual


@pytest.mark.parametrize("seed", range(6))
def test_exact_enumeration_preserves_target_distribution(seed):
    gen = torch.Generator().manual_seed(seed)
    vocab = 5
    p = _random_dist(gen, vocab, 1.5)
    q = _random_dist(gen, vocab, 1.5)
    top3 = torch.argsort(q, descending=True)[:3].tolist()
    for draws in (
        _draws_deterministic(top3),
        _draws_deterministic([4, 0]),
        _draws_without_replacement(q, 3),
        _draws_iid(q, 2),
    ):
        assert abs(sum(w for w, _ in draws) - 1.0) < 1e-12
        torch.testing.assert_close(_output_distribution(p, draws, _accept_or_residual), p, atol=1e-12, rtol=0)
        # ignoring q (point-mass proposals) is also lossless for any candidates drawn independently of the
        # verification's coins; it only accepts less often
        torch.testing.assert_close(_output_distribution(p, draws, _as_if_deterministic), p, atol=1e-12, rtol=0)


def test_exact_enumeration_catches_wrong_variants():
    gen = torch.Generator().manual_seed(0)
    p = _random_dist(gen, 5, 1.5)
    q = _random_dist(gen, 5, 1.5)
    top2 = torch.argsort(q, descending=True)[:2].tolist()
    wrong = [
        _output_distribution(p, _draws_deterministic(top2), _forget_removal),
        _output_distribution(p, _draws_without_replacement(q, 2), _ratio_accept_point_residual),
        # draws without replacement verified as if they were i.i.d. (always against the original q)
        _output_distribution(
            p, [(w, [(t, q) for t, _ in c]) for w, c in _draws_without_replacement(q, 3)], _accept_or_residual
        ),
    ]
    for dist in wrong:
        assert (dist - p).abs().max() > 1e-3


# ---------------------------------------------------------------- Monte Carlo over a decoding loop


VOCAB = 6
CHOICES = [[0], [1], [2], [0, 0], [0, 1], [1, 0]]


class SyntheticLM:
    """Target p and draft q as fixed random tables keyed by the last token of the prefix."""

    def __init__(self, seed: int):
        gen = torch.Generator().manual_seed(seed)
        self.p = torch.softmax(torch.randn(VOCAB + 1, VOCAB, generator=gen, dtype=DOUBLE) * 1.2, dim=-1)
        noise = torch.randn(VOCAB + 1, VOCAB, generator=gen, dtype=DOUBLE) * 0.8
        self.q = torch.softmax(torch.log(self.p) + noise, dim=-1)  # a correlated but different drafter

    def target(self, prefix):
        return self.p[prefix[-1] if prefix else VOCAB]

    def draft(self, prefix):
        return self.q[prefix[-1] if prefix else VOCAB]


def _build_tree_tokens(lm, tree, prefix, gen, mode):
    """Fill the static tree: deterministic top-k of q, or draws without replacement from q."""
    tokens, proposals = [-1] * tree.size, torch.zeros(tree.size, VOCAB, dtype=DOUBLE)
    node_prefix = {0: list(prefix)}
    for node in range(tree.size):
        kids = tree.children[node]
        if not kids:
            continue
        q = lm.draft(node_prefix[node]).clone()
        if mode == "topk":
            ranked = torch.argsort(q, descending=True).tolist()
            for child in kids:
                tokens[child] = ranked[tree.paths[child][-1]]
        else:
            for child in kids:
                proposals[child] = q
                tokens[child] = int(torch.multinomial(q, 1, generator=gen))
                q = q.clone()
                q[tokens[child]] = 0.0
                q = q / q.sum()
        for child in kids:
            node_prefix[child] = node_prefix[node] + [tokens[child]]
    target = torch.stack([lm.target(node_prefix[n]) for n in range(tree.size)])
    return tokens, target, (None if mode == "topk" else proposals)


def _first_two_token_histogram(lm, mode, samples, seed):
    tree = tree_from_choices(CHOICES)
    gen = torch.Generator().manual_seed(seed)
    counts = torch.zeros(VOCAB, VOCAB, dtype=DOUBLE)
    accepted_any = 0
    for _ in range(samples):
        out: list[int] = []
        while len(out) < 2:
            tokens, target, proposals = _build_tree_tokens(lm, tree, out, gen, mode)
            result = sample_accept(tree, tokens, target, generator=gen, proposal_probs=proposals)
            accepted_any += bool(result.nodes)
            out += result.new_tokens
        counts[out[0], out[1]] += 1
    return counts, accepted_any


def _expected_pairs(lm, samples):
    first = lm.target([])
    return samples * first[:, None] * torch.stack([lm.target([t]) for t in range(VOCAB)])


P_THRESHOLD = 1e-3  # a correct sampler fails with probability 1e-3 per case; seeds are fixed anyway


@pytest.mark.parametrize("mode", ["topk", "without_replacement"])
def test_sample_accept_reproduces_target_distribution(mode):
    lm = SyntheticLM(seed=3)
    samples = 6000
    counts, accepted_any = _first_two_token_histogram(lm, mode, samples, seed=11)
    assert accepted_any > samples // 4  # the drafts are actually being accepted, so the test has teeth
    assert chi_square_pvalue(counts, _expected_pairs(lm, samples)) > P_THRESHOLD


def test_chi_square_harness_rejects_a_broken_residual(monkeypatch):
    monkeypatch.setattr(acceptance, "accept_or_residual", _forget_removal)
    lm = SyntheticLM(seed=3)
    samples = 6000
    counts, _ = _first_two_token_histogram(lm, "topk", samples, seed=11)
    assert chi_square_pvalue(counts, _expected_pairs(lm, samples)) < 1e-6


def _chain_first_two_token_histogram(lm, samples, seed, k=2):
    """Draft-target on the synthetic model through `verify_chain`: k drafts sampled from q, then verified."""
    gen = torch.Generator().manual_seed(seed)
    seq = Sequence.start(
        0, Request(input_ids=[0], max_new_tokens=10, sampling=SamplingConfig(temperature=1.0, seed=seed))
    )
    counts = torch.zeros(VOCAB, VOCAB, dtype=DOUBLE)
    accepted_any = 0
    for _ in range(samples):
        out: list[int] = []
        while len(out) < 2:
            drafts, q = [], []
            for _ in range(k):
                q.append(lm.draft(out + drafts))
                drafts.append(int(torch.multinomial(q[-1], 1, generator=gen)))
            logits = torch.log(torch.stack([lm.target(out + drafts[:i]) for i in range(k + 1)]))
            tokens, accepted = _chain(seq, logits, drafts, torch.stack(q).float())
            accepted_any += accepted > 0
            out += tokens
        counts[out[0], out[1]] += 1
    return counts, accepted_any


def test_chain_speculative_sampling_reproduces_target_distribution():
    lm = SyntheticLM(seed=5)
    samples = 6000
    counts, accepted_any = _chain_first_two_token_histogram(lm, samples, seed=13)
    assert accepted_any > samples // 4
    assert chi_square_pvalue(counts, _expected_pairs(lm, samples)) > P_THRESHOLD


def test_chain_harness_rejects_a_broken_residual(monkeypatch):
    """After a rejection, resampling from p instead of norm(max(0, p - q)) is caught for chains too."""
    from specbuild.reference.decoder import sampling

    monkeypatch.setattr(sampling, "residual", lambda p, q: p)
    lm = SyntheticLM(seed=5)
    samples = 6000
    counts, _ = _chain_first_two_token_histogram(lm, samples, seed=13)
    assert chi_square_pvalue(counts, _expected_pairs(lm, samples)) < 1e-6
