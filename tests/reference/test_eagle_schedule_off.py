"""EAGLE with speculation scheduled off (draft length 0) does no head work: no head forward at prefill or at a plain
step, so an adaptive deployment costs what the baseline does where its schedule turned drafting off. When drafting
resumes, the head catches up on everything it skipped (prompt included) and the output stays autoregressive's.

Counted, not timed: every head forward goes through `Eagle.head_forward`, which the test wraps.
"""

from __future__ import annotations

import inspect
import json

import pytest
from zoo_engines import build_target, has_extras

LIMITS = dict(max_batch_size=4, max_input_len=96, max_seq_len=192, max_num_tokens=2048)
CHOICES = [[0], [0, 0], [1], [0, 0, 0]]
HEADS = {
    "eagle1": ("eagle", {"eagle_choices": CHOICES}, 4, {"eagle": "eagle"}, {"num_eagle_layers": 3}),
    "eagle3": ("eagle3", {"max_draft_len": 3}, 3, {"eagle3": "eagle3"}, {}),
}


@pytest.fixture(scope="module")
def folders(shipped_tiny, tmp_path_factory):
    root = tmp_path_factory.mktemp("schedule-off")
    out = {
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
    for label, (method, decoding, draft_len, extra, pretrained) in HEADS.items():
        if has_extras(shipped_tiny, extra):
            out[label] = build_target(
                shipped_tiny,
                root / label,
                method=method,
                decoding={**decoding, "draft_len_schedule": f"1:{draft_len},2:0"},
                max_draft_len=draft_len,
                extra=extra,
                pretrained=pretrained,
                limits=LIMITS,
            )
    return out


def _requests(shipped_tiny, lengths):
    from transformers import AutoTokenizer

    from specbuild.reference.decoder.request import Request

    tok = AutoTokenizer.from_pretrained(shipped_tiny / "tokenizer")
    source = inspect.getsource(json)
    return [
        Request(input_ids=tok(source[i * 900 : i * 900 + 900])["input_ids"][:60], max_new_tokens=n)
        for i, n in enumerate(lengths)
    ]


def _run(folder, requests):
    """Outputs, and the number of head forwards with the tokens each fed (per row)."""
    import torch

    from specbuild.reference.engine_folder import load_engine
    from specbuild.reference.decoder.executor import Executor

    torch.set_num_threads(1)
    ex = Executor(load_engine(folder))
    method = ex._groups["engine"].method
    calls = []
    if hasattr(method, "head_forward"):
        original = method.head_forward

        def counted(kv, features, tokens, positions, attend=None):
            calls.append([len(t) for t in tokens])
            return original(kv, features, tokens, positions, attend)

        method.head_forward = counted
    results = ex.run(requests)
    return [r.output_ids for r in results], calls


@pytest.mark.parametrize("label", list(HEADS))
def test_no_head_work_while_the_schedule_says_zero(shipped_tiny, folders, label):
    if label not in folders:
        pytest.skip(f"checkpoints/tiny has no {HEADS[label][3]} folder in this checkout")
    requests = _requests(shipped_tiny, (24, 24, 24))  # finish together: never fewer than 2 in flight
    reference, _ = _run(folders["autoregressive"], requests)
    outputs, calls = _run(folders[label], requests)
    assert outputs == reference
    assert calls == [], f"{label}: {len(calls)} head forwards while speculation was scheduled off"


@pytest.mark.parametrize("label", list(HEADS))
def test_head_catches_up_on_the_prompt_when_drafting_resumes(shipped_tiny, folders, label):
    if label not in folders:
        pytest.skip(f"checkpoints/tiny has no {HEADS[label][3]} folder in this checkout")
    requests = _requests(shipped_tiny, (6, 40))  # the second drafts alone once the first is done
    reference, _ = _run(folders["autoregressive"], requests)
    outputs, calls = _run(folders[label], requests)
    assert outputs == reference
    assert calls, f"{label}: the lone request never drafted"
    # the first head forward is the lone request's catch-up: its prompt, the token after it and the plain steps
    plain_tokens = 6  # the executor admitted both, 2 in flight for the first request's 6 tokens
    assert calls[0][0] >= len(requests[1].input_ids) + plain_tokens - 1, calls[0]
