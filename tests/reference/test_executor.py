"""Executor behaviour: stop conditions, cancel, limits, batching, stats, thread safety."""

from __future__ import annotations

import threading

import pytest
import torch

from specbuild.facts import metrics
from specbuild.errors import UserError
from specbuild.reference.decoder.executor import Executor
from specbuild.reference.decoder.request import Request, RequestStats
from specbuild.reference.decoder.sampling import SamplingConfig

PROMPT = [5, 9, 17, 5, 9, 17, 5, 9]


@pytest.fixture(scope="module")
def target(models, engine_factory):
    return engine_factory(models["target"], max_batch_size=3)


@pytest.fixture(scope="module")
def free_run(target):
    """The greedy continuation of PROMPT without stop conditions (the reference for the stop tests)."""
    return Executor(target).run([Request(input_ids=PROMPT, max_new_tokens=30)])[0].output_ids


def _executors(models, engine_factory):
    t = models["target"]
    yield Executor(engine_factory(t, max_batch_size=3))
    yield Executor(
        engine_factory(
            t, "prompt_lookup", decoding={"max_draft_len": 4, "max_matching_ngram_size": 2}, max_batch_size=3
        )
    )
    yield Executor(
        engine_factory(t, "draft_target", decoding={"num_draft_tokens": 4}, max_batch_size=3),
        engine_factory(models["draft_close"], "draft_target", role="draft", max_batch_size=3),
    )


def test_end_id_is_not_emitted_and_stops(models, engine_factory, free_run):
    end = free_run[6]
    first = free_run.index(end)
    for ex in _executors(models, engine_factory):
        res = ex.run([Request(input_ids=PROMPT, max_new_tokens=30, end_id=end)])[0]
        assert res.output_ids == free_run[:first] and res.finish_reason == "end_id"


def test_stop_words_are_emitted_and_stop(models, engine_factory, free_run):
    word = free_run[4:6]
    cut = next(i for i in range(2, 31) if free_run[i - 2 : i] == word)
    for ex in _executors(models, engine_factory):
        res = ex.run([Request(input_ids=PROMPT, max_new_tokens=30, stop_words=[[127, 126, 125], word])])[0]
        assert res.output_ids == free_run[:cut] and res.finish_reason == "stop_words"


def test_length_and_single_token(models, engine_factory, free_run):
    for ex in _executors(models, engine_factory):
        res = ex.run([Request(input_ids=PROMPT, max_new_tokens=n) for n in (1, 2, 7)])
        assert [r.output_ids for r in res] == [free_run[:1], free_run[:2], free_run[:7]]
        assert all(r.finish_reason == "length" for r in res)
        assert res[0].stats.steps == 0 and res[2].stats.steps >= 1


def test_bad_words_are_never_generated(models, engine_factory, free_run):
    banned_single = free_run[0]
    pair = free_run[2:4]
    for ex in _executors(models, engine_factory):
        out = ex.run([Request(input_ids=PROMPT, max_new_tokens=30, bad_words=[[banned_single], pair])])[0].output_ids
        assert banned_single not in out
        full = PROMPT + out
        assert all(full[i : i + 2] != pair for i in range(len(PROMPT) - 1, len(full) - 1))
        assert out != free_run


def test_cancel_pending_and_active(target):
    ex = Executor(target)
    a = ex.enqueue(Request(input_ids=PROMPT, max_new_tokens=20))
    b = ex.enqueue(Request(input_ids=PROMPT, max_new_tokens=20))
    ex.cancel(b)  # still pending
    events = ex.step()
    assert {(e.request_id, e.finished, e.finish_reason) for e in events} == {(b, True, "cancelled"), (a, False, None)}
    ex.step()
    ex.cancel(a)  # decoding
    events = ex.step()
    assert [(e.request_id, e.new_tokens, e.finished, e.finish_reason) for e in events] == [(a, [], True, "cancelled")]
    assert not ex.has_work()


def test_max_batch_size_and_joining(target):
    ex = Executor(target)  # max_batch_size=3
    ids = [ex.enqueue(Request(input_ids=PROMPT[: 2 + i], max_new_tokens=3 + i)) for i in range(5)]
    first = ex.step()
    assert sorted(e.request_id for e in first) == ids[:3] and ex.num_active == 3
    seen_active = []
    while ex.has_work():
        ex.step()
        seen_active.append(ex.num_active)
        assert ex.num_active <= 3
    assert max(seen_active) == 3


def test_requests_join_while_others_decode(target):
    """A request enqueued mid-flight is prefilled at the next step and gets the same tokens as alone."""
    alone = Executor(target).run([Request(input_ids=[1, 2, 3], max_new_tokens=6)])[0].output_ids
    ex = Executor(target)
    a = ex.enqueue(Request(input_ids=PROMPT, max_new_tokens=10))
    ex.step()
    ex.step()
    b = ex.enqueue(Request(input_ids=[1, 2, 3], max_new_tokens=6))
    events = ex.step()
    assert {e.request_id for e in events} == {a, b}
    got = [t for e in events if e.request_id == b for t in e.new_tokens]
    while ex.has_work():
        got += [t for e in ex.step() if e.request_id == b for t in e.new_tokens]
    assert got == alone


def test_limits_are_clear_user_errors(models, engine_factory, target):
    ex = Executor(target)  # max_input_len 64, max_seq_len 160, vocab 128
    with pytest.raises(UserError, match="prompt has 65 tokens, more than the engine's max_input_len=64"):
        ex.enqueue(Request(input_ids=[1] * 65, max_new_tokens=1))
    with pytest.raises(UserError, match=r"= 161 exceeds the engine's max_seq_len=160"):
        ex.enqueue(Request(input_ids=[1] * 60, max_new_tokens=101))
    with pytest.raises(UserError, match="outside the vocabulary"):
        ex.enqueue(Request(input_ids=[128], max_new_tokens=1))
    with pytest.raises(UserError, match="empty"):
        ex.enqueue(Request(input_ids=[], max_new_tokens=1))
    with pytest.raises(UserError, match="top_p"):
        ex.enqueue(Request(input_ids=[1], max_new_tokens=1, sampling=SamplingConfig(temperature=1.0, top_p=0.0)))
    with pytest.raises(UserError, match="draft_tokens_external"):
        ex.enqueue(Request(input_ids=[1], max_new_tokens=2, draft_tokens=[1]))
    external = Executor(engine_factory(models["target"], "prompt_lookup", decoding={"max_draft_len": 6}))
    with pytest.raises(UserError, match="7 draft tokens exceed the engine's max_draft_len=6"):
        external.enqueue(Request(input_ids=[1], max_new_tokens=2, draft_tokens=[1] * 7))
    with pytest.raises(UserError, match=r"draft_logits has shape \(2, 5\), expected \(2, 128\)"):
        external.enqueue(Request(input_ids=[1], max_new_tokens=2, draft_tokens=[1, 2], draft_logits=torch.zeros(2, 5)))
    assert not ex.has_work() and not external.has_work()


def test_stats_follow_the_metric_definitions(models, engine_factory):
    ex = Executor(
        engine_factory(models["target"], "draft_target", decoding={"num_draft_tokens": 4}),
        engine_factory(models["draft_close"], "draft_target", role="draft"),
    )
    res = ex.run([Request(input_ids=PROMPT, max_new_tokens=40)])[0]
    s = res.stats
    assert s.steps == len(s.accepted_per_step) == len(s.drafted_per_step)
    assert s.total_accepted_draft_tokens == sum(s.accepted_per_step)
    assert s.total_draft_tokens == sum(s.drafted_per_step)
    assert s.acceptance_rate == metrics.acceptance_rate(s.total_accepted_draft_tokens, s.total_draft_tokens)
    assert s.mean_acceptance_length == pytest.approx(1 + s.total_accepted_draft_tokens / s.steps)
    # every step yields accepted + 1 tokens, the prefill one more: that is the whole output
    assert len(res.output_ids) == 1 + sum(a + 1 for a in s.accepted_per_step)
    assert s.per_position_accepted[0] == sum(a >= 1 for a in s.accepted_per_step)
    assert s.per_position_drafted[0] == sum(d >= 1 for d in s.drafted_per_step)
    assert 0 < s.acceptance_rate < 1


def test_record_step():
    s = RequestStats()
    s.record_step(4, 2)
    s.record_step(2, 2)
    s.record_step(0, 0)
    assert s.per_position_drafted == [2, 2, 1, 1] and s.per_position_accepted == [2, 2]
    assert s.mean_acceptance_length == pytest.approx((4 + 3) / 3)
    with pytest.raises(ValueError):
        s.record_step(1, 2)


def test_enqueue_and_cancel_from_other_threads(target):
    ex = Executor(target)
    ids, errors = [], []

    def client(i):
        try:
            rid = ex.enqueue(Request(input_ids=PROMPT[: 1 + i % 7], max_new_tokens=4))
            ids.append(rid)
            if i % 4 == 0:
                ex.cancel(rid)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(24)]
    for t in threads:
        t.start()
    finished = {}
    while any(t.is_alive() for t in threads) or ex.has_work():
        for ev in ex.step():
            if ev.finished:
                assert ev.request_id not in finished
                finished[ev.request_id] = ev.finish_reason
    for t in threads:
        t.join()
    while ex.has_work():
        for ev in ex.step():
            if ev.finished:
                finished[ev.request_id] = ev.finish_reason
    assert not errors and sorted(finished) == sorted(ids) and len(set(ids)) == 24
    assert set(finished.values()) <= {"length", "cancelled"}


def test_sampling_is_reproducible_per_seed(models, engine_factory):
    ex = Executor(
        engine_factory(models["target"], "draft_target", decoding={"num_draft_tokens": 3}),
        engine_factory(models["draft_close"], "draft_target", role="draft"),
    )
    reqs = [
        Request(input_ids=PROMPT, max_new_tokens=12, sampling=SamplingConfig(temperature=1.0, seed=s))
        for s in (1, 2, 1)
    ]
    outs = [r.output_ids for r in ex.run(reqs)]
    assert outs[0] == outs[2] and outs[0] != outs[1]


@pytest.mark.parametrize("reuse", [False, True])
def test_bls_style_rounds_with_kv_cache_reuse(models, engine_factory, reuse):
    """The Triton BLS loop: each round the draft engine drafts k tokens for the whole context and the target
    verifies them in a new request. With KV reuse each round prefills only what is new; tokens are the same."""
    k, n_new = 4, 30
    target_engine = engine_factory(models["target"], "draft_target", decoding={"num_draft_tokens": k})
    expected = Executor(target_engine).run([Request(input_ids=PROMPT, max_new_tokens=n_new)])[0].output_ids
    target = Executor(target_engine, enable_kv_cache_reuse=reuse)
    draft = Executor(engine_factory(models["draft_close"], "draft_target", role="draft"), enable_kv_cache_reuse=reuse)
    out = []
    while len(out) < n_new:
        context = PROMPT + out
        budget = n_new - len(out)
        drafts = draft.run([Request(input_ids=context, max_new_tokens=k)])[0].output_ids[: budget - 1]
        res = target.run([Request(input_ids=context, max_new_tokens=min(k + 1, budget), draft_tokens=drafts or None)])[
            0
        ]
        out += res.output_ids
    assert out == expected
    if reuse:
        assert target.prefix_store.hits >= 5 and draft.prefix_store.hits >= 5
        assert target.prefix_store.reused_tokens > 5 * len(PROMPT)
    else:
        assert target.prefix_store is None


def test_kv_reuse_takes_the_longest_shared_prefix(target):
    ex = Executor(target, enable_kv_cache_reuse=True)
    first = ex.run([Request(input_ids=PROMPT, max_new_tokens=5)])[0].output_ids
    # the kept row holds PROMPT + first[:4] (the last token is never cached)
    again = ex.run([Request(input_ids=PROMPT + first[:2] + [0], max_new_tokens=5)])[0].output_ids
    assert ex.prefix_store.reused_tokens == len(PROMPT) + 2
    fresh = Executor(target).run([Request(input_ids=PROMPT + first[:2] + [0], max_new_tokens=5)])[0].output_ids
    assert again == fresh


def _plain_rounds(ex, prompts, n_new, per_round):
    """Conversations decoded as the Triton BLS's plain rounds: each round a new request of `per_round[i]` tokens
    with the whole text so far as its prompt, all conversations in flight together. Returns each one's tokens."""
    texts = [list(p) for p in prompts]
    active = {ex.enqueue(Request(input_ids=t, max_new_tokens=per_round[i])): i for i, t in enumerate(texts)}
    while active:
        for ev in ex.step():
            i = active[ev.request_id]
            texts[i] += ev.new_tokens
            if ev.finished:
                del active[ev.request_id]
                left = n_new - (len(texts[i]) - len(prompts[i]))
                if left > 0:
                    active[ex.enqueue(Request(input_ids=texts[i], max_new_tokens=min(per_round[i], left)))] = i
    return [t[len(p) :] for t, p in zip(texts, prompts)]


def test_a_reused_prefix_prefills_in_the_decoding_forward(target, monkeypatch):
    """With KV reuse, an admitted request left with a short tail to prefill joins the running batch's forward
    (FUSED_PREFILL_TOKENS) instead of a forward of its own: the same tokens, fewer target forwards, and its
    prefill is not counted as a decoding step."""
    from specbuild.reference.decoder import executor as executor_module

    prompts = [PROMPT, [3, 1, 4, 1, 5, 9, 2, 6], [2, 7, 1, 8, 2, 8]]
    expected = [r.output_ids for r in Executor(target).run([Request(input_ids=p, max_new_tokens=12) for p in prompts])]
    forwards = {}
    model = target.model
    original = type(model).forward

    def counting(self, *args, **kwargs):
        forwards[mode] = forwards.get(mode, 0) + 1
        return original(self, *args, **kwargs)

    monkeypatch.setattr(type(model), "forward", counting)
    for mode, fused in (("fused", executor_module.FUSED_PREFILL_TOKENS), ("alone", 0)):
        monkeypatch.setattr(executor_module, "FUSED_PREFILL_TOKENS", fused)
        ex = Executor(target, enable_kv_cache_reuse=True)
        assert _plain_rounds(ex, prompts, 12, per_round=[3, 4, 5]) == expected, mode
    assert forwards["fused"] < forwards["alone"] * 0.8, forwards

    ex = Executor(target, enable_kv_cache_reuse=True)
    first = ex.run([Request(input_ids=PROMPT, max_new_tokens=4)])[0].output_ids
    long_run = ex.enqueue(Request(input_ids=prompts[1], max_new_tokens=6))
    ex.step()
    again = ex.enqueue(Request(input_ids=PROMPT + first, max_new_tokens=3))  # joins long_run's forward
    stats = {}
    while ex.has_work():
        for ev in ex.step():
            if ev.finished:
                stats[ev.request_id] = ev.stats
    assert stats[again].steps == 2 and stats[long_run].steps == 5  # prefills are not decoding steps
