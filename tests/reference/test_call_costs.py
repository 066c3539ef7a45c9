"""The cost model's per-call timers (reference/call_costs.py) on the shipped tiny zoo: timing a method leaves its
outputs as they were and leaves nothing behind; the drafting methods' drafting calls are timed and the lookup methods
have none; the acceptance the timers count is the executor's own; measure_levels reports one level per concurrency,
with steps of that many requests; and the cost model's formula (specbuild/facts/cost_model.py)."""

from __future__ import annotations

import inspect
import json

import pytest
from zoo_engines import METHODS, build_draft, build_target, has_extras

from specbuild.facts.cost_model import LevelModel, StepCosts, limit

LIMITS = dict(max_batch_size=4, max_input_len=64, max_seq_len=128, max_num_tokens=1024)
TIMED = ("draft_target", "prompt_lookup", "medusa", "eagle1")
NEW_TOKENS = 16


@pytest.fixture(scope="module")
def engines(shipped_tiny, tmp_path_factory):
    from specbuild.reference.engine_folder import load_engine

    root = tmp_path_factory.mktemp("call-costs")
    out = {
        "autoregressive": load_engine(
            build_target(
                shipped_tiny,
                root / "ar",
                method="none",
                decoding={},
                max_draft_len=0,
                extra={},
                pretrained={},
                limits=LIMITS,
            )
        ),
        "draft": load_engine(build_draft(shipped_tiny, root / "draft", LIMITS)),
    }
    for label in TIMED:
        method, decoding, draft_len, extra, pretrained = METHODS[label]
        if has_extras(shipped_tiny, extra):
            out[label] = load_engine(
                build_target(
                    shipped_tiny,
                    root / label,
                    method=method,
                    decoding=decoding,
                    max_draft_len=draft_len,
                    extra=extra,
                    pretrained=pretrained,
                    limits=LIMITS,
                )
            )
    return out


@pytest.fixture(scope="module")
def prompts(shipped_tiny):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(shipped_tiny / "tokenizer")
    source = inspect.getsource(json)
    return [tok(source[i * 500 : i * 500 + 500])["input_ids"][:32] for i in range(2)]


def _run(engine, draft, prompts, batch: int = 1):
    from dataclasses import replace

    from specbuild.reference.decoder.executor import Executor
    from specbuild.reference.decoder.request import Request

    ex = Executor(engine, draft if engine.decoding_method == "draft_target" else None)
    ex.limits = replace(ex.limits, max_batch_size=batch)
    return ex, lambda: ex.run([Request(input_ids=list(p), max_new_tokens=NEW_TOKENS) for p in prompts])


@pytest.mark.parametrize("label", ("autoregressive",) + TIMED)
def test_timing_a_method_changes_nothing_and_times_its_calls(label, engines, prompts):
    from specbuild.reference.call_costs import CallTimer, engine_method

    if label not in engines:
        pytest.skip(f"checkpoints/tiny has no heads for {label}")
    ex, run = _run(engines[label], engines["draft"], prompts)
    method = engine_method(ex)
    plain = run()
    timer = CallTimer(method)
    timed = run()
    timer.remove()
    assert not {"step", method.drafting} & set(vars(method)) and "forward" not in vars(method.target)
    again = run()
    assert [r.output_ids for r in timed] == [r.output_ids for r in plain] == [r.output_ids for r in again]

    costs = timer.costs(1)
    decoded_steps = sum(r.stats.steps for r in timed)  # every step decodes one request here (batch 1)
    assert costs.steps == decoded_steps and costs.rows == 1
    assert costs.accepted == sum(r.stats.total_accepted_draft_tokens for r in timed)
    assert costs.target_ms > 0 and costs.step_ms >= costs.target_ms + costs.draft_ms
    if method.drafting is None:
        assert costs.draft_ms == 0
    else:
        assert costs.draft_ms > 0
    if label != "autoregressive":
        assert costs.acceptance_length > 1  # the shipped drafters' drafts are accepted on this code


def test_a_second_timer_on_the_same_method_is_refused(engines, prompts):
    from specbuild.reference.call_costs import CallTimer, engine_method

    method = engine_method(_run(engines["autoregressive"], None, prompts)[0])
    timer = CallTimer(method)
    try:
        with pytest.raises(RuntimeError, match="already replaced"):
            CallTimer(method)
    finally:
        timer.remove()


def test_measure_levels_times_steps_of_each_level(engines, prompts):
    from specbuild.reference.call_costs import measure_levels

    method = "eagle1" if "eagle1" in engines else "draft_target"
    draft = engines["draft"] if method == "draft_target" else None
    models = measure_levels(engines[method], engines["autoregressive"], draft, prompts, NEW_TOKENS, [1, 2], rounds=1)
    assert [m.concurrency for m in models] == [1, 2]
    for m in models:
        assert m.baseline.rows == m.concurrency and m.method.rows == m.concurrency
        assert m.baseline.acceptance_length == 1.0 and m.method.acceptance_length > 1
        assert m.limit == pytest.approx(
            m.method.acceptance_length * m.baseline.target_ms / (m.method.target_ms + m.method.draft_ms)
        )
        assert m.in_process > 0 and m.served is None


def test_cost_model_formula():
    assert limit(3.0, 10.0, 12.0, 3.0) == pytest.approx(2.0)
    assert limit(3.0, 10.0, 0.0, 0.0) is None
    base = StepCosts(steps=10, rows=1, step_ms=11.0, target_ms=10.0, draft_ms=0.0, accepted=0, verifications=10)
    spec = StepCosts(steps=4, rows=1, step_ms=16.0, target_ms=12.0, draft_ms=3.0, accepted=8, verifications=4)
    level = LevelModel(1, base, spec, in_process=1.5, served=1.2)
    assert spec.acceptance_length == 3.0 and level.limit == pytest.approx(2.0)
    d = level.to_dict()
    assert (d["limit"], d["in_process_share_of_limit"], d["served_share_of_limit"]) == (2.0, 0.75, 0.6)
    assert LevelModel(1, base, spec).to_dict()["served_share_of_limit"] is None


def test_pooled_costs_weigh_by_steps():
    a = StepCosts(steps=1, rows=1, step_ms=4.0, target_ms=2.0, draft_ms=1.0, accepted=2, verifications=1)
    b = StepCosts(steps=3, rows=2, step_ms=8.0, target_ms=6.0, draft_ms=1.0, accepted=3, verifications=6)
    pooled = StepCosts.pooled([a, b, StepCosts(0, 0.0, 0.0, 0.0, 0.0)])
    assert (pooled.steps, pooled.rows, pooled.step_ms, pooled.target_ms, pooled.draft_ms) == (4, 1.75, 7.0, 5.0, 1.0)
    assert pooled.acceptance_length == pytest.approx(1 + 5 / 7)
    assert StepCosts.pooled([]).steps == 0
