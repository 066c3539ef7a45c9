"""Speculative sampling is lossless: the generated tokens are distributed exactly as the target's own samples.

On a vocabulary-16 model the exact distribution of the first three generated tokens is computed by brute force
(a from-scratch forward over every one of the 16^3 continuations, then the sampling transforms). Each method
generates N samples (one request per seed) and a chi-square goodness-of-fit test compares
    the joint of (t1, t2), the joint of (t2, t3) and the marginal of t3
with the exact law; cells expected below 5 are pooled. Each test rejects at family-wise level 1e-3 (Bonferroni
over its three p-values: any p < 1e-3 / 3). Requests ask for 6 tokens so the first speculative step may draft 3.
Deliberately broken acceptance rules (resampling from p instead of norm(max(0, p - q)) after a rejection) must
fail the same test: that shows it has power.
"""

from __future__ import annotations

import itertools

import pytest
import torch

from specbuild.reference.decoder import sampling
from specbuild.reference.decoder.executor import Executor
from specbuild.reference.decoder.request import Request
from specbuild.reference.decoder.sampling import SamplingConfig

P_REJECT = 1e-3 / 3  # per p-value (three per test)
N = 3000
# Every token of the vocabulary occurs in the prompt, so prompt lookup always finds a continuation.
PROMPT = [3, 5, 7, 1, 0, 2, 4, 6, 8, 9, 10, 11, 12, 13, 14, 15, 3, 5]
CONFIGS = {
    "t1.0": SamplingConfig(temperature=1.0),
    "t0.8-k10-p0.9": SamplingConfig(temperature=0.8, top_k=10, top_p=0.9),
}
LIMITS = dict(max_batch_size=128, max_input_len=24, max_seq_len=32, max_num_tokens=4096, max_draft_len=3)


def exact_law(model, cfg: SamplingConfig) -> torch.Tensor:
    """P(t1, t2, t3 | PROMPT) as a [V, V, V] tensor, from full forwards without any cache."""
    vocab = model.vocab_size
    with torch.inference_mode():

        def next_probs(prefixes: list[list[int]]) -> torch.Tensor:
            ids = torch.tensor([PROMPT + p for p in prefixes])
            logits = model.lm_head(model.decoder(input_ids=ids, use_cache=False).last_hidden_state[:, -1]).float()
            return sampling.probabilities(logits, cfg)

        p1 = next_probs([[]])[0]
        p2 = next_probs([[a] for a in range(vocab)])  # [V, V]
        p3 = next_probs([[a, b] for a, b in itertools.product(range(vocab), repeat=2)]).view(vocab, vocab, vocab)
    return p1[:, None, None] * p2[:, :, None] * p3


def chi_square_p(observed: torch.Tensor, expected: torch.Tensor) -> float:
    """Goodness-of-fit p-value; cells with expected count < 5 are pooled into one."""
    observed, expected = observed.flatten().double(), expected.flatten().double()
    small = expected < 5
    obs = torch.cat([observed[~small], observed[small].sum()[None]])
    exp = torch.cat([expected[~small], expected[small].sum()[None]])
    if exp[-1] < 5:  # fold a too-small pool into the smallest kept cell
        i = int(exp[:-1].argmin())
        obs[i] += obs[-1]
        exp[i] += exp[-1]
        obs, exp = obs[:-1], exp[:-1]
    stat = float(((obs - exp) ** 2 / exp).sum())
    dof = len(exp) - 1
    return float(
        torch.special.gammaincc(torch.tensor(dof / 2, dtype=torch.float64), torch.tensor(stat / 2, dtype=torch.float64))
    )


def p_values(samples: list[list[int]], law: torch.Tensor) -> dict[str, float]:
    vocab = law.shape[0]
    counts = torch.zeros(vocab, vocab, vocab)
    for s in samples:
        counts[s[0], s[1], s[2]] += 1
    n = len(samples)
    return {
        "joint(t1,t2)": chi_square_p(counts.sum(2), n * law.sum(2)),
        "joint(t2,t3)": chi_square_p(counts.sum(0), n * law.sum(0)),
        "t3": chi_square_p(counts.sum((0, 1)), n * law.sum((0, 1))),
    }


def generate(executor: Executor, cfg: SamplingConfig, **request_fields) -> list[list[int]]:
    requests = [
        Request(
            input_ids=PROMPT,
            max_new_tokens=6,
            sampling=SamplingConfig(cfg.temperature, cfg.top_k, cfg.top_p, seed),
            **request_fields,
        )
        for seed in range(N)
    ]
    results = executor.run(requests)
    assert all(len(r.output_ids) == 6 for r in results)
    return [r.output_ids[:3] for r in results]


@pytest.fixture(scope="module")
def setup(models, engine_factory):
    target = models["target16"]
    engines = {
        "autoregressive": lambda: Executor(engine_factory(target, **LIMITS)),
        "draft_target[k=1]": lambda: Executor(
            engine_factory(target, "draft_target", decoding={"num_draft_tokens": 1}, **LIMITS),
            engine_factory(models["draft16"], "draft_target", role="draft", **LIMITS),
        ),
        "draft_target[k=3]": lambda: Executor(
            engine_factory(target, "draft_target", decoding={"num_draft_tokens": 3}, **LIMITS),
            engine_factory(models["draft16"], "draft_target", role="draft", **LIMITS),
        ),
        "prompt_lookup": lambda: Executor(
            engine_factory(
                target, "prompt_lookup", decoding={"max_draft_len": 3, "max_matching_ngram_size": 2}, **LIMITS
            )
        ),
    }
    model = engine_factory(target, **LIMITS).model
    laws = {name: exact_law(model, cfg) for name, cfg in CONFIGS.items()}
    return engines, laws


@pytest.mark.parametrize("config", list(CONFIGS))
@pytest.mark.parametrize("method", ["autoregressive", "draft_target[k=1]", "draft_target[k=3]", "prompt_lookup"])
def test_matches_target_distribution(setup, method, config):
    engines, laws = setup
    ex = engines[method]()
    pv = p_values(generate(ex, CONFIGS[config]), laws[config])
    assert min(pv.values()) >= P_REJECT, f"{method} {config}: {pv}"


@pytest.mark.parametrize("method", ["draft_target[k=3]", "prompt_lookup"])
def test_broken_rejection_rule_is_detected(setup, method, monkeypatch):
    """After a rejection, resample from p (the rejected token may come back) instead of norm(max(0, p - q))."""
    engines, laws = setup
    monkeypatch.setattr(sampling, "residual", lambda p, q: p)
    pv = p_values(generate(engines[method](), CONFIGS["t1.0"]), laws["t1.0"])
    assert min(pv.values()) < P_REJECT, f"the broken rule was not detected: {pv}"


def _external_drafts(draft_model, cfg: SamplingConfig, seed: int, k: int = 2):
    """Drafts sampled outside the executor from the draft model (as the BLS does), with their logits."""
    gen = torch.Generator().manual_seed(10_000 + seed)
    tokens, logits = [], []
    with torch.inference_mode():
        for _ in range(k):
            row = draft_model.full_logits(PROMPT + tokens)[-1]
            tokens.append(sampling.sample(sampling.probabilities(row, cfg), gen))
            logits.append(row)
    return tokens, torch.stack(logits)


@pytest.mark.parametrize("with_logits", [True, False])
def test_external_drafts_are_lossless(models, engine_factory, setup, with_logits):
    """The BLS path: the request's own verification gives t1 (and t2); drafts with logits use the ratio rule,
    drafts without logits are a deterministic proposal."""
    _, laws = setup
    cfg = CONFIGS["t1.0"]
    engine = engine_factory(models["target16"], "draft_target", decoding={"num_draft_tokens": 2}, **LIMITS)
    draft_model = engine_factory(models["draft16"], "draft_target", role="draft", **LIMITS).model
    law = laws["t1.0"]
    best1 = int(law.sum((1, 2)).argmax())
    guess = [best1, int(law[best1].sum(1).argmax())]  # the target's most likely pair: a deterministic proposal
    requests = []
    for seed in range(N):
        if with_logits:
            drafts, logits = _external_drafts(draft_model, cfg, seed)
        else:
            drafts, logits = guess, None
        requests.append(
            Request(
                input_ids=PROMPT,
                max_new_tokens=3,
                sampling=SamplingConfig(1.0, 0, 1.0, seed),
                draft_tokens=drafts,
                draft_logits=logits,
            )
        )
    results = Executor(engine).run(requests)
    samples = [r.output_ids for r in results]
    assert sum(r.stats.total_accepted_draft_tokens for r in results) > N // 10
    pv = p_values(samples, law)
    assert min(pv.values()) >= P_REJECT, pv
