"""Adaptive speculation on the reference runtime: with a draft_len_schedule every method drafts at the length the
schedule gives for the number of requests in flight, and stays lossless at every schedule point.

On the shipped tiny zoo (trained drafters, so drafts are really accepted), four requests of different lengths
start together: the batch shrinks 4 -> 3 -> 2 -> 1 as they finish, so one run visits every point of
{1: full, 2: short, 4: 0} (the long request drafts nothing while four are in flight, then short drafts, then full
ones: EAGLE's head catches up on the positions it skipped). Each step's drafts are recorded: they must follow the
schedule (none at 0, at most `short` at 2-3, more than `short` somewhere at 1), and every output must equal
autoregressive decoding token for token.
"""

from __future__ import annotations

import inspect
import json

import pytest
from zoo_engines import build_draft, build_target, has_extras

from specbuild.standalone import draft_len_schedule

LIMITS = dict(max_batch_size=4, max_input_len=96, max_seq_len=192, max_num_tokens=2048)
MEDUSA_CHOICES = [[0], [0, 0], [1], [0, 0, 0], [0, 1], [1, 0]]  # most valuable first: every prefix is a tree
EAGLE_CHOICES = [[0], [0, 0], [0, 0, 0], [1], [0, 0, 0, 0], [0, 1]]
# label: (method, decoding, max_draft_len, extra folders, pretrained extras, full length, short length)
METHODS = {
    "prompt_lookup": ("prompt_lookup", {"max_draft_len": 4, "max_matching_ngram_size": 3}, 4, {}, {}, 4, 2),
    "draft_target": ("draft_target", {"num_draft_tokens": 4}, 4, {}, {}, 4, 1),
    "medusa": ("medusa", {"medusa_choices": MEDUSA_CHOICES}, 6, {"medusa": "medusa"}, None, 6, 2),
    "eagle1": ("eagle", {"eagle_choices": EAGLE_CHOICES}, 6, {"eagle": "eagle"}, {"num_eagle_layers": 4}, 6, 3),
    "eagle2": (
        "eagle",
        {"eagle_use_dynamic_tree": True, "eagle_dynamic_tree_max_top_k": 2},
        7,
        {"eagle": "eagle"},
        {"num_eagle_layers": 4},
        7,
        2,
    ),
    "eagle3": ("eagle3", {"max_draft_len": 4}, 4, {"eagle3": "eagle3"}, {}, 4, 2),
}


def schedule(label: str) -> dict[int, int]:
    *_, full, short = METHODS[label]
    return {1: full, 2: short, 4: 0}


@pytest.fixture(scope="module")
def zoo(shipped_tiny, tmp_path_factory):
    """label -> engine folder (with the schedule in specbuild.decoding), plus "autoregressive" and "draft"."""
    root = tmp_path_factory.mktemp("adaptive")
    folders = {}
    for label, (method, decoding, draft_len, extra, pretrained, _, _) in METHODS.items():
        if not has_extras(shipped_tiny, extra):
            continue
        decoding = {**decoding, "draft_len_schedule": draft_len_schedule.as_text(sorted(schedule(label).items()))}
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
    folders["autoregressive"] = build_target(
        shipped_tiny,
        root / "autoregressive",
        method="none",
        decoding={},
        max_draft_len=0,
        extra={},
        pretrained={},
        limits=LIMITS,
    )
    folders["draft"] = build_draft(shipped_tiny, root / "draft", LIMITS)
    return folders


@pytest.fixture(scope="module")
def zoo_requests(shipped_tiny):
    from transformers import AutoTokenizer

    from specbuild.reference.decoder.request import Request

    tok = AutoTokenizer.from_pretrained(shipped_tiny / "tokenizer")
    source = inspect.getsource(json)
    prompts = [tok(source[i * 900 : i * 900 + 900])["input_ids"][:72] for i in range(4)]
    return [Request(input_ids=p, max_new_tokens=n) for p, n in zip(prompts, (16, 28, 44, 72))]


def run_recorded(folders, label, requests):
    """Outputs, and per decode step (requests in flight, the scheduled length, the most drafts of a row)."""
    import torch

    from specbuild.reference.engine_folder import load_engine
    from specbuild.reference.decoder.executor import Executor

    torch.set_num_threads(1)
    draft = load_engine(folders["draft"]) if label == "draft_target" else None
    ex = Executor(load_engine(folders[label]), draft)
    method = ex._groups["engine"].method
    steps = []
    plain_step = method.step

    def step(batch):
        outputs = plain_step(batch)
        steps.append((len(batch), method.scheduled_length, max(o.drafted for o in outputs)))
        return outputs

    method.step = step
    results = ex.run(requests)
    return [r.output_ids for r in results], steps, sum(r.stats.total_accepted_draft_tokens for r in results)


def test_draft_length_follows_the_requests_in_flight():
    points = draft_len_schedule.parse({1: 4, 4: 2, 8: 0})
    assert [draft_len_schedule.draft_length(points, n) for n in range(1, 11)] == [4, 4, 4, 2, 2, 2, 2, 0, 0, 0]
    assert draft_len_schedule.parse("1:4, 4:2,8:0") == points == draft_len_schedule.parse('{"8": 0, "1": 4, "4": 2}')
    assert draft_len_schedule.as_text(points) == "1:4,4:2,8:0"
    # TensorRT-LLM after 1.2: each key is the largest batch size of its length; exact up to max_batch_size
    assert draft_len_schedule.upper_bound_form(points, 16) == {3: 4, 7: 2}
    assert draft_len_schedule.upper_bound_form(draft_len_schedule.parse({1: 4, 4: 2}), 8) == {3: 4, 8: 2}
    assert draft_len_schedule.max_concurrency(draft_len_schedule.parse({1: 4, 3: 0})) == 2
    assert draft_len_schedule.max_concurrency(points) is None  # shortens on the way: max_concurrency cannot say it
    for bad in ({2: 4}, {1: -1}, {0: 4, 1: 4}, "1=4", {}):
        with pytest.raises(ValueError):
            draft_len_schedule.parse(bad)


@pytest.mark.parametrize("label", list(METHODS))
def test_lossless_at_every_schedule_point(zoo, zoo_requests, label):
    if label not in zoo:
        pytest.skip(f"checkpoints/tiny has no {METHODS[label][3]} folder in this checkout")
    reference, _, _ = run_recorded(zoo, "autoregressive", zoo_requests)
    outputs, steps, accepted = run_recorded(zoo, label, zoo_requests)
    assert outputs == reference, f"{label}: adaptive speculation changed the output"
    full, short = METHODS[label][5], METHODS[label][6]
    seen = {}
    for in_flight, length, drafted in steps:
        want = draft_len_schedule.draft_length(draft_len_schedule.parse(schedule(label)), in_flight)
        assert length == want, f"{label}: {in_flight} in flight drafted at {length}, the schedule says {want}"
        seen.setdefault(length, []).append(drafted)
    assert set(seen) == {full, short, 0}, f"{label}: the run did not visit every schedule point: {sorted(seen)}"
    assert max(seen[0]) == 0, f"{label}: drafted while the schedule said 0"
    # a chain drafts `length` tokens, a tree is at most that deep (it has at most `length` nodes)
    assert max(seen[short]) <= short, f"{label}: drafted {max(seen[short])} at scheduled length {short}"
    assert max(seen[full]) > (short if label != "eagle2" else 1), f"{label}: never drafted beyond the short length"
    assert accepted > 0, f"{label}: no draft accepted, the comparison means little"


def test_a_method_without_a_draft_length_refuses_a_schedule(shipped_tiny, tmp_path):
    from specbuild.errors import UserError
    from specbuild.reference.engine_folder import build_engine, load_engine
    from specbuild.reference.decoder.executor import Executor

    build_engine(
        tmp_path / "la",
        role="target",
        method="lookahead",
        decoding={
            "lookahead_window_size": 3,
            "lookahead_ngram_size": 3,
            "lookahead_verification_set_size": 2,
            "draft_len_schedule": "1:9,4:0",
        },
        model_dir=shipped_tiny / "target",
        tokenizer_dir=shipped_tiny / "tokenizer",
        dtype="float32",
        limits={**LIMITS, "max_draft_len": 9},
    )
    with pytest.raises(UserError, match="no draft length to follow the load"):
        Executor(load_engine(tmp_path / "la"))


def test_a_tree_whose_prefixes_are_not_trees_is_refused(shipped_tiny, tmp_path):
    from specbuild.errors import UserError
    from specbuild.reference.engine_folder import build_engine, load_engine
    from specbuild.reference.decoder.executor import Executor

    medusa_cfg = json.loads((shipped_tiny / "medusa" / "config.json").read_text())
    build_engine(
        tmp_path / "m",
        role="target",
        method="medusa",
        decoding={"medusa_choices": [[0, 0], [0], [1]], "draft_len_schedule": "1:3,2:1"},
        model_dir=shipped_tiny / "target",
        tokenizer_dir=shipped_tiny / "tokenizer",
        dtype="float32",
        extra_dirs={"medusa": shipped_tiny / "medusa"},
        limits={**LIMITS, "max_draft_len": 3},
        pretrained_extra={
            "num_medusa_heads": medusa_cfg["medusa_num_heads"],
            "num_medusa_layers": medusa_cfg["medusa_num_layers"],
        },
    )
    with pytest.raises(UserError, match=r"medusa_choices\[0\] = \[0, 0\] comes before its parent"):
        Executor(load_engine(tmp_path / "m"))
