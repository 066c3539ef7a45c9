"""Greedy decoding: every method yields exactly the autoregressive tokens, token for token.

The autoregressive executor is itself checked against a plain loop (argmax of a from-scratch forward over the
whole text, no cache, batch 1). Then each method runs the same 60 requests at batch 1 and in mixed-length
batches where requests join while others decode; stop words, end ids and bad words are mixed in so that
multi-token acceptance meets every stop rule.
"""

from __future__ import annotations

import random

import pytest
import torch

from specbuild.reference.decoder.executor import Executor
from specbuild.reference.decoder.request import Request

N_PROMPTS = 60


def make_requests(
    vocab: int,
    n: int,
    seed: int,
    *,
    max_prompt: int = 40,
    max_new: int = 40,
    alphabet: int | None = None,
    prompts: list[list[int]] | None = None,
) -> list[Request]:
    """Mixed lengths; a small alphabet for half the prompts so n-grams repeat; some stop/end/bad words."""
    rng = random.Random(seed)
    requests = []
    for i in range(n):
        if prompts is not None:
            prompt = prompts[i % len(prompts)][: rng.randrange(4, max_prompt)]
        else:
            pool = range(alphabet or vocab) if i % 2 else range(vocab)
            prompt = [rng.choice(pool) for _ in range(rng.randrange(1, max_prompt))]
        req = Request(input_ids=prompt, max_new_tokens=rng.randrange(1, max_new))
        kind = i % 5
        if kind == 1:
            req.end_id = rng.randrange(vocab)
        elif kind == 2:
            req.stop_words = [[rng.randrange(vocab)], [rng.randrange(vocab), rng.randrange(vocab)]]
        elif kind == 3:
            req.bad_words = [[rng.randrange(vocab)], [rng.randrange(vocab), rng.randrange(vocab)]]
        requests.append(req)
    return requests


def plain_greedy(model, req: Request) -> list[int]:
    """The definition: argmax of a fresh forward over the whole text, one token at a time."""
    tokens, out = list(req.input_ids), []
    while len(out) < req.max_new_tokens:
        logits = model.full_logits(tokens)[-1].clone()
        for word in req.bad_words:
            if len(word) == 1 or tokens[-(len(word) - 1) :] == word[:-1]:
                logits[word[-1]] = float("-inf")
        tok = int(logits.argmax())
        if tok == req.end_id:
            break
        tokens.append(tok)
        out.append(tok)
        if any(tokens[-len(w) :] == w for w in req.stop_words):
            break
    return out


def run_staggered(ex: Executor, requests: list[Request], seed: int) -> list[list[int]]:
    """Enqueue a few requests, then more while the executor is decoding (they join mid-flight)."""
    rng = random.Random(seed)
    queue = list(enumerate(requests))
    ids: dict[int, int] = {}
    outputs: dict[int, list[int]] = {}
    finished: set[int] = set()
    while queue or ex.has_work():
        for _ in range(rng.randrange(0, 4) if ids else 3):
            if queue:
                i, req = queue.pop(0)
                ids[ex.enqueue(req)] = i
        for ev in ex.step():
            outputs.setdefault(ids[ev.request_id], []).extend(ev.new_tokens)
            if ev.finished:
                finished.add(ev.request_id)
    assert len(finished) == len(requests)
    return [outputs.get(i, []) for i in range(len(requests))]


def assert_same(got: list[list[int]], expected: list[list[int]], what: str) -> None:
    bad = [i for i, (g, e) in enumerate(zip(got, expected)) if g != e]
    assert not bad, (
        f"{what}: {len(bad)} of {len(expected)} requests differ, first #{bad[0]}: {got[bad[0]]} != {expected[bad[0]]}"
    )


@pytest.fixture(scope="module")
def random_setup(models, engine_factory):
    target = engine_factory(models["target"])
    requests = make_requests(target.vocab_size, N_PROMPTS, seed=0, alphabet=6)
    baseline = [r.output_ids for r in Executor(engine_factory(models["target"], max_batch_size=1)).run(requests)]
    return requests, baseline


def test_autoregressive_matches_plain_loop(models, engine_factory, random_setup):
    requests, baseline = random_setup
    model = engine_factory(models["target"]).model
    assert_same(baseline, [plain_greedy(model, r) for r in requests], "autoregressive (batch 1) vs plain loop")
    assert sum(map(len, baseline)) > 500


def _method_engines(models, engine_factory, batch: int):
    t = models["target"]
    yield "autoregressive", Executor(engine_factory(t, max_batch_size=batch))
    yield (
        "prompt_lookup",
        Executor(
            engine_factory(
                t, "prompt_lookup", decoding={"max_draft_len": 4, "max_matching_ngram_size": 3}, max_batch_size=batch
            )
        ),
    )
    for draft, k in (("draft_close", 4), ("draft_far", 3)):
        yield (
            f"draft_target[{draft}]",
            Executor(
                engine_factory(t, "draft_target", decoding={"num_draft_tokens": k}, max_batch_size=batch),
                draft_engine=engine_factory(models[draft], "draft_target", role="draft", max_batch_size=batch),
            ),
        )


@pytest.mark.parametrize("batch", [1, 8])
def test_every_method_matches_autoregressive(models, engine_factory, random_setup, batch):
    requests, baseline = random_setup
    accepted, drafted, full = {}, {}, {}
    for name, ex in _method_engines(models, engine_factory, batch):
        if batch == 1:
            results = ex.run(requests)
            got = [r.output_ids for r in results]
            accepted[name] = sum(r.stats.total_accepted_draft_tokens for r in results)
            drafted[name] = sum(r.stats.total_draft_tokens for r in results)
            full[name] = sum(
                a == d > 0 for r in results for a, d in zip(r.stats.accepted_per_step, r.stats.drafted_per_step)
            )
        else:
            got = run_staggered(ex, requests, seed=batch)
        assert_same(got, baseline, f"{name} at batch {batch}")
    if batch == 1:  # the comparison means something only if drafts were accepted (and rejected)
        for name in ("prompt_lookup", "draft_target[draft_close]", "draft_target[draft_far]"):
            assert 0 < accepted[name] < drafted[name], name
        assert full["draft_target[draft_close]"] > 50  # full acceptance: bonus token and the draft's catch-up


def test_external_drafts_match_autoregressive(models, engine_factory, random_setup):
    """Drafts made outside (the BLS path): the true continuation corrupted at a random point, with and
    without draft logits. The request yields the accepted drafts plus one, then continues greedily."""
    requests, baseline = random_setup
    engine = engine_factory(models["target"], "draft_target", decoding={"num_draft_tokens": 6}, max_batch_size=8)
    rng = random.Random(3)
    ext, expected, accept_expected = [], [], []
    for req, out in zip(requests, baseline):
        if req.bad_words or not out:
            continue
        k = rng.randrange(1, 7)
        good = rng.randrange(0, k + 1)
        drafts = (out + [0] * k)[:good] + [rng.randrange(engine.vocab_size) for _ in range(k - good)]
        logits = torch.randn(k, engine.vocab_size) if rng.random() < 0.5 else None
        new = Request(
            input_ids=req.input_ids,
            max_new_tokens=req.max_new_tokens,
            end_id=req.end_id,
            stop_words=req.stop_words,
            draft_tokens=drafts,
            draft_logits=logits,
        )
        ext.append(new)
        expected.append(out)
        accept_expected.append(min(good, k, max(req.max_new_tokens - 1, 0)))
    results = Executor(engine).run(ext)
    assert_same([r.output_ids for r in results], expected, "external drafts")
    assert len(ext) >= 40
    for res, exp_req, n_ok in zip(results, ext, accept_expected):
        # the first step is the verification; a random wrong draft may still equal the true token
        assert res.stats.drafted_per_step[0] == min(len(exp_req.draft_tokens), exp_req.max_new_tokens - 1)
        assert res.stats.accepted_per_step[0] >= min(n_ok, len(res.output_ids))


def test_shipped_tiny_models(engine_factory, shipped_tiny):
    """The same equality on the shipped zoo (real tokenizer, trained target and distilled draft)."""
    import inspect
    import json as _json
    import random as _random

    from transformers import AutoTokenizer

    tiny = shipped_tiny
    tok = AutoTokenizer.from_pretrained(tiny / "tokenizer" if (tiny / "tokenizer").is_dir() else tiny / "target")
    sources = [inspect.getsource(m) for m in (_json, _random, inspect)]
    prompts = [tok(s[i * 400 : i * 400 + 400])["input_ids"] for s in sources for i in range(20)]
    limits = dict(max_input_len=128, max_seq_len=256)
    target = engine_factory(tiny / "target", **limits)
    requests = make_requests(target.vocab_size, 50, seed=5, max_prompt=60, max_new=32, prompts=prompts)
    for r in requests:  # end ids from the real vocabulary
        r.end_id = tok.eos_token_id if r.end_id is not None else None
    baseline = [
        r.output_ids for r in Executor(engine_factory(tiny / "target", max_batch_size=1, **limits)).run(requests)
    ]
    for batch in (1, 8):
        draft = engine_factory(tiny / "draft", "draft_target", role="draft", max_batch_size=batch, **limits)
        executors = {
            "prompt_lookup": Executor(
                engine_factory(
                    tiny / "target",
                    "prompt_lookup",
                    decoding={"max_draft_len": 4, "max_matching_ngram_size": 3},
                    max_batch_size=batch,
                    **limits,
                )
            ),
            "draft_target": Executor(
                engine_factory(
                    tiny / "target", "draft_target", decoding={"num_draft_tokens": 4}, max_batch_size=batch, **limits
                ),
                draft,
            ),
        }
        for name, ex in executors.items():
            if batch == 1:
                results = ex.run(requests)
                assert sum(r.stats.total_accepted_draft_tokens for r in results) > 0, name
                got = [r.output_ids for r in results]
            else:
                got = run_staggered(ex, requests, seed=11)
            assert_same(got, baseline, f"{name} at batch {batch} on the shipped tiny models")
