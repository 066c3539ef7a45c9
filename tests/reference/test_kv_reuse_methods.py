"""KV reuse (`enable_kv_cache_reuse`) for the tree methods, as TensorRT-LLM's block reuse serves them: Medusa,
EAGLE-1/2/3 and lookahead start a request from a finished one's prefix instead of prefilling it.

On the shipped tiny zoo (trained drafters: drafts are really accepted): requests that repeat and extend earlier ones
go through an executor with KV reuse and one without. Outputs must equal autoregressive decoding token for token,
prefixes must really be reused, and the drafts must be as good with reuse as without (EAGLE's head reads the target's
features of the reused prefix, kept beside its KV: wrong or missing features would show as a lower acceptance).
With a schedule that turns drafting off (EAGLE at 0), an admitted request with a reused prefix prefills in the
running batch's plain step, as autoregressive decoding's does: fewer target forwards, the same tokens; when drafting
resumes its head catches up on the reused prefix's features.
"""

from __future__ import annotations

import inspect
import json

import pytest
from zoo_engines import METHODS, build_target, has_extras

LIMITS = dict(max_batch_size=4, max_input_len=120, max_seq_len=200, max_num_tokens=2048)
TREE_METHODS = {label: METHODS[label] for label in ("medusa", "eagle1", "eagle2", "lookahead")}
TREE_METHODS["eagle3"] = ("eagle3", {"max_draft_len": 4}, 4, {"eagle3": "eagle3"}, {})


@pytest.fixture(scope="module")
def zoo(shipped_tiny, tmp_path_factory):
    root = tmp_path_factory.mktemp("kv-reuse")
    folders = {
        "autoregressive": build_target(
            shipped_tiny,
            root / "ar",
            method="none",
            decoding={},
            max_draft_len=0,
            extra={},
            pretrained={},
            limits=LIMITS,
        )
    }
    for label, (method, decoding, draft_len, extra, pretrained) in TREE_METHODS.items():
        if has_extras(shipped_tiny, extra):
            folders[label] = build_target(
                shipped_tiny,
                root / label,
                method=method,
                decoding=decoding,
                max_draft_len=draft_len,
                extra=extra,
                pretrained=pretrained,
                limits=LIMITS,
            )
    for label in ("eagle1", "eagle3"):  # float32 heads: the tests below compare what they compute to 1e-4
        method, decoding, draft_len, extra, pretrained = TREE_METHODS[label]
        if has_extras(shipped_tiny, extra):
            folders[f"{label}_float32"] = build_target(
                shipped_tiny,
                root / f"{label}_float32",
                method=method,
                decoding={**decoding, "draft_dtype": "float32"},
                max_draft_len=draft_len,
                extra=extra,
                pretrained=pretrained,
                limits=LIMITS,
            )
    eagle = TREE_METHODS["eagle1"]
    folders["eagle1_adaptive"] = build_target(
        shipped_tiny,
        root / "eagle1_adaptive",
        method=eagle[0],
        decoding={"eagle_choices": [[0], [0, 0], [1], [0, 0, 0]], "draft_len_schedule": "1:4,2:0"},
        max_draft_len=4,
        extra=eagle[3],
        pretrained={"num_eagle_layers": 3},
        limits=LIMITS,
    )
    return folders


@pytest.fixture(scope="module")
def prompts(shipped_tiny):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(shipped_tiny / "tokenizer")
    source = inspect.getsource(json)
    return [tok(source[i * 700 : i * 700 + 700])["input_ids"][:40] for i in range(3)]


def _executor(folder, reuse: bool):
    import torch

    from specbuild.reference.engine_folder import load_engine
    from specbuild.reference.decoder.executor import Executor

    torch.set_num_threads(1)
    return Executor(load_engine(folder), enable_kv_cache_reuse=reuse)


def _conversation(ex, prompts, n_new: int = 24):
    """Each prompt, then the same prompt again, then the prompt extended by the first answer's opening tokens, one
    request at a time: (outputs, accepted draft tokens, verification steps)."""
    from specbuild.reference.decoder.request import Request

    outputs, accepted, steps = [], 0, 0
    for prompt in prompts:
        first = None
        for text in (prompt, prompt, None):
            text = text if text is not None else prompt + first[:10]
            result = ex.run([Request(input_ids=text, max_new_tokens=n_new)])[0]
            first = first or result.output_ids
            outputs.append(result.output_ids)
            accepted += result.stats.total_accepted_draft_tokens
            steps += result.stats.steps
    return outputs, accepted, steps


@pytest.mark.parametrize("label", list(TREE_METHODS))
def test_a_reused_prefix_decodes_as_a_fresh_prefill(zoo, prompts, label):
    if label not in zoo:
        pytest.skip(f"checkpoints/tiny has no {TREE_METHODS[label][3]} folder in this checkout")
    reference, _, _ = _conversation(_executor(zoo["autoregressive"], False), prompts)
    fresh_out, fresh_accepted, fresh_steps = _conversation(_executor(zoo[label], False), prompts)
    reusing = _executor(zoo[label], True)
    reused_out, reused_accepted, reused_steps = _conversation(reusing, prompts)
    assert fresh_out == reference and reused_out == reference
    assert reusing.prefix_store.hits >= 2 * len(prompts)
    assert reusing.prefix_store.reused_tokens >= 2 * sum(len(p) for p in prompts) - 2 * len(prompts)
    fresh_al = (fresh_accepted + fresh_steps) / fresh_steps
    reused_al = (reused_accepted + reused_steps) / reused_steps
    assert fresh_al > 1.3, f"{label}: the drafter accepts too little here to tell reuse from no reuse"
    assert reused_al >= 0.95 * fresh_al, (label, reused_al, fresh_al)


def test_eagle_with_drafting_off_prefills_reused_rows_in_the_plain_step(zoo, prompts, monkeypatch):
    """At two or more requests in flight the schedule says 0: a request whose prompt a finished one covers joins the
    running batch's plain step instead of a prefill forward of its own (fewer target forwards, the same tokens);
    the last request, decoding alone, drafts, its head caught up on the reused prefix's features."""
    from specbuild.reference.decoder.request import Request

    def run(folder, reuse):
        ex = _executor(folder, reuse)
        model = ex.engine.model
        original = type(model).forward
        counted = []
        monkeypatch.setattr(
            type(model), "forward", lambda self, *a, **k: counted.append(self is model) or original(self, *a, **k)
        )
        ex.run([Request(input_ids=p, max_new_tokens=8) for p in prompts])  # every prompt finished once: kept
        counted.clear()
        # a long request keeps the batch at 2+ while the repeated prompts arrive one after another
        long_run = ex.enqueue(Request(input_ids=prompts[0][:30], max_new_tokens=60))
        ids, outputs, accepted, finished = [long_run], {}, {}, set()
        pending = [Request(input_ids=p + [7], max_new_tokens=6) for p in prompts]
        while ex.has_work():
            for ev in ex.step():
                outputs[ev.request_id] = outputs.get(ev.request_id, []) + ev.new_tokens
                accepted[ev.request_id] = ev.stats.total_accepted_draft_tokens
                if ev.finished:
                    finished.add(ev.request_id)
            if pending and len(ids) - len(finished) < 3:  # joins a running batch: the long request decodes
                ids.append(ex.enqueue(pending.pop(0)))
        monkeypatch.setattr(type(model), "forward", original)
        return [outputs[i] for i in ids], sum(counted), accepted[long_run]

    reference, _, _ = run(zoo["autoregressive"], False)
    alone, alone_forwards, _ = run(zoo["eagle1_adaptive"], False)
    joined, joined_forwards, long_accepted = run(zoo["eagle1_adaptive"], True)
    assert alone == reference and joined == reference
    assert joined_forwards <= alone_forwards - len(prompts), (joined_forwards, alone_forwards)
    assert long_accepted > 0, "the long request never drafted once alone"


@pytest.mark.parametrize("label", ["eagle1", "eagle3"])
def test_the_features_kept_with_a_prefix_are_the_targets_at_each_position(zoo, prompts, label):
    """What an EAGLE row leaves beside its KV: the target's features (EAGLE-1: the final hidden state; EAGLE-3: the
    captured layers) at every kept position, as a fresh forward over those tokens computes them."""
    import torch

    if f"{label}_float32" not in zoo:
        pytest.skip(f"checkpoints/tiny has no {TREE_METHODS[label][3]} folder in this checkout")
    from specbuild.reference.decoder.request import Request

    ex = _executor(zoo[f"{label}_float32"], True)
    output = ex.run([Request(input_ids=prompts[0], max_new_tokens=24)])[0].output_ids
    method = ex._groups["engine"].method
    (name,) = method.prefix_extras()
    probe = prompts[0] + output + [0]  # the kept entry (all but the last token) is a prefix of it
    n, _, extras = ex.prefix_store.longest_prefix(probe, (name,))
    assert n >= len(prompts[0]) + len(output) - 1 and len(extras[name]) >= n
    model = ex.engine.model
    layers = getattr(method, "layers", None)
    with torch.inference_mode():
        out = model.forward(model.new_cache(1), [probe[:n]], logits="none", capture_layers=layers)
    want = out.hidden[0] if layers is None else out.captured[0]
    torch.testing.assert_close(extras[name][:n], want.to(extras[name].dtype), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("label", ["eagle1", "eagle3"])
def test_a_reused_prefix_gives_the_head_the_cache_a_fresh_prefill_gives(zoo, prompts, label):
    """A request that reuses a finished one's prefix prefills the head over the kept features and its own tail: the
    head's cache after that prefill equals a fresh executor's after prefilling the whole prompt."""
    import torch

    from specbuild.reference.decoder.request import Request

    if f"{label}_float32" not in zoo:
        pytest.skip(f"checkpoints/tiny has no {TREE_METHODS[label][3]} folder in this checkout")
    reusing, fresh = _executor(zoo[f"{label}_float32"], True), _executor(zoo[f"{label}_float32"], False)
    output = reusing.run([Request(input_ids=prompts[1], max_new_tokens=16)])[0].output_ids
    prompt = prompts[1] + output[:10] + [5]
    caches = []
    for ex in (reusing, fresh):
        ex.enqueue(Request(input_ids=prompt, max_new_tokens=4))
        ex.step()  # the prefill: target, then the head over every prompt entry
        caches.append(ex._groups["engine"].batch.caches["eagle"])
    assert reusing.prefix_store.reused_tokens >= len(prompts[1]) + 10
    mine, ref = caches[0].store.layers[0], caches[1].store.layers[0]
    assert caches[0].lengths == caches[1].lengths == [len(prompt)]
    torch.testing.assert_close(mine.keys, ref.keys, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(mine.values, ref.values, atol=1e-4, rtol=1e-4)
