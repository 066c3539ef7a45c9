"""The acceptance-rate switch (TensorRT-LLM's SpeculationGate): the rolling average of one rate per speculating
iteration, judged from the window-th sample on, disables speculation for good; in the executor the method then drafts
nothing for every later request, and the output stays the target's own."""

from __future__ import annotations

import inspect
import json

import pytest
from zoo_engines import build_target, has_extras

from specbuild.reference.decoder.speculation_gate import SpeculationGate, decoding_keys, from_decoding

LIMITS = dict(max_batch_size=2, max_input_len=96, max_seq_len=192, max_num_tokens=2048)
METHODS = {
    "prompt_lookup": ("prompt_lookup", {"max_draft_len": 4, "max_matching_ngram_size": 3}, 4, {}, {}),
    "eagle3": ("eagle3", {"max_draft_len": 4}, 4, {"eagle3": "eagle3"}, {}),
}


def test_nothing_is_judged_before_the_window_fills():
    gate = SpeculationGate(window=3, threshold=0.5)
    assert not gate.record_rate(0.0) and not gate.record_rate(0.0)
    assert gate.average is None and not gate.disabled
    assert gate.record_rate(0.0) and gate.disabled and gate.disabled_at == 3


def test_the_average_rolls_over_the_last_window_samples_and_disabling_is_permanent():
    gate = SpeculationGate(window=3, threshold=0.5)
    for rate in (0.9, 0.9, 0.6):  # 0.8
        assert not gate.record_rate(rate)
    assert not gate.record_rate(0.1)  # 0.9, 0.6, 0.1 -> 0.533
    assert gate.average == pytest.approx(1.6 / 3)
    assert gate.record_rate(0.2)  # 0.6, 0.1, 0.2 -> 0.3
    assert gate.disabled_at == 5
    assert not gate.record_rate(1.0) and gate.disabled  # once off, off


def test_iterations_without_drafts_are_not_samples():
    gate = SpeculationGate(window=2, threshold=0.5)
    assert not gate.record(0, 0)
    assert gate.samples == 0
    gate.record(1, 4)
    assert gate.record(0, 4)  # (0.25 + 0) / 2 < 0.5
    with pytest.raises(ValueError):
        SpeculationGate(window=2, threshold=0.5).record_rate(1.5)


def test_decoding_keys_and_their_checks():
    assert decoding_keys(None, 8) == {} and decoding_keys(0.5, 0) == {} and decoding_keys(0.5, None) == {}
    keys = decoding_keys(0.5, 8)
    assert keys == {"acceptance_rate_threshold": 0.5, "acceptance_rate_window_size": 8}
    assert from_decoding(keys, "x").window == 8
    assert from_decoding({}, "x") is None
    assert from_decoding({"acceptance_rate_threshold": 0.5, "acceptance_rate_window_size": 0}, "x") is None
    with pytest.raises(ValueError, match="acceptance_rate_window_size is missing"):
        from_decoding({"acceptance_rate_threshold": 0.5}, "x")
    with pytest.raises(ValueError, match="in \\[0, 1\\]"):
        from_decoding({"acceptance_rate_threshold": 1.5, "acceptance_rate_window_size": 4}, "x")


@pytest.fixture(scope="module")
def engines(shipped_tiny, tmp_path_factory):
    """(label, threshold) -> engine folder; threshold None: no switch (the autoregressive engine is 'none')."""
    root = tmp_path_factory.mktemp("gate")
    folders = {}
    for label, (method, decoding, draft_len, extra, pretrained) in METHODS.items():
        if not has_extras(shipped_tiny, extra):
            continue
        for threshold in (0.95, 0.01):
            folders[label, threshold] = build_target(
                shipped_tiny,
                root / f"{label}-{threshold}",
                method=method,
                decoding={**decoding, **decoding_keys(threshold, 6)},
                max_draft_len=draft_len,
                extra=extra,
                pretrained=pretrained,
                limits=LIMITS,
            )
    folders["none"] = build_target(
        shipped_tiny,
        root / "none",
        method="none",
        decoding={},
        max_draft_len=0,
        extra={},
        pretrained={},
        limits=LIMITS,
    )
    return folders


@pytest.fixture(scope="module")
def requests(shipped_tiny):
    from transformers import AutoTokenizer

    from specbuild.reference.decoder.request import Request

    tok = AutoTokenizer.from_pretrained(shipped_tiny / "tokenizer")
    source = inspect.getsource(json)
    prompts = [tok(source[i * 700 : i * 700 + 700])["input_ids"][:64] for i in range(6)]
    return [Request(input_ids=p, max_new_tokens=24) for p in prompts]


def run(folder, requests):
    """Each request alone, in turn (as the validation check sends them); returns the results and, per decode
    iteration, (drafted, accepted) summed over the batch."""
    import torch

    from specbuild.reference.decoder.executor import Executor
    from specbuild.reference.engine_folder import load_engine

    torch.set_num_threads(1)
    ex = Executor(load_engine(folder))
    method = ex._groups["engine"].method
    steps = []
    plain = method.step

    def step(batch):
        outputs = plain(batch)
        steps.append((sum(o.drafted for o in outputs), sum(o.accepted for o in outputs)))
        return outputs

    method.step = step
    method.executor_groups = ex._groups  # what the tests look at after the run
    results = [ex.run([r])[0] for r in requests]
    return results, steps, method


def ex_groups(method):
    return method.executor_groups


@pytest.mark.parametrize("label", list(METHODS))
def test_poor_acceptance_switches_drafting_off_for_good(engines, requests, label):
    if (label, 0.95) not in engines:
        pytest.skip(f"checkpoints/tiny has no {METHODS[label][3]} folder in this checkout")
    reference, _, _ = run(engines["none"], requests)
    results, steps, method = run(engines[label, 0.95], requests)
    assert [r.output_ids for r in results] == [r.output_ids for r in reference]
    # the switch trips where an independent replay of the samples says it must
    expected, samples = None, []
    for i, (drafted, accepted) in enumerate(steps):
        if drafted:
            samples.append(accepted / drafted)
            if len(samples) >= 6 and sum(samples[-6:]) / 6 < 0.95:
                expected = i
                break
    assert expected is not None, f"{label}: acceptance on these prompts never fell below 0.95: no switch to test"
    assert method.speculation_off and method.gate.disabled_at == len(samples)
    assert all(drafted == 0 for drafted, _ in steps[expected + 1 :]), f"{label}: drafted after the switch"
    # requests that started after the switch report no drafts at all, and decode without the method's state
    assert results[-1].stats.total_draft_tokens == 0
    assert "plain" in ex_groups(method) and ex_groups(method)["plain"].method.name == "autoregressive"


@pytest.mark.parametrize("label", list(METHODS))
def test_a_low_threshold_never_switches_off(engines, requests, label):
    if (label, 0.01) not in engines:
        pytest.skip(f"checkpoints/tiny has no {METHODS[label][3]} folder in this checkout")
    results, steps, method = run(engines[label, 0.01], requests[:3])
    assert not method.speculation_off
    assert results[-1].stats.total_draft_tokens > 0


def test_a_method_without_a_draft_length_refuses_the_switch(shipped_tiny, tmp_path):
    from specbuild.errors import UserError
    from specbuild.reference.decoder.executor import Executor
    from specbuild.reference.engine_folder import build_engine, load_engine

    build_engine(
        tmp_path / "la",
        role="target",
        method="lookahead",
        decoding={
            "lookahead_window_size": 3,
            "lookahead_ngram_size": 3,
            "lookahead_verification_set_size": 2,
            **decoding_keys(0.5, 4),
        },
        model_dir=shipped_tiny / "target",
        tokenizer_dir=shipped_tiny / "tokenizer",
        dtype="float32",
        limits={**LIMITS, "max_draft_len": 9},
    )
    with pytest.raises(UserError, match="no draft length that could drop to 0"):
        Executor(load_engine(tmp_path / "la"))
