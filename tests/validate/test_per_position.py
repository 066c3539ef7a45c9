"""Per-position acceptance never vanishes for one odd request (issue #39 item 5): the streams are built as the HTTP
client builds them (the engine contract's `absorb`, one server response at a time, each with its own counters), and
fed to the records, the aggregation and the report's table. No server."""

from __future__ import annotations

import re

import pytest

from specbuild.load import load_build
from specbuild.validate.aggregate import summarize_acceptance
from specbuild.validate.checks import acceptance
from specbuild.validate.client import ENGINE, Generation, Output
from specbuild.validate.report.markdown import acceptance_group_lines
from specbuild.validate.stats import AcceptanceRecord

DEPTH = 5  # the demo's chain of 5 drafts


def served(steps: list[int], responses: list[int] | None = None, drafts: int = DEPTH) -> tuple[Generation, Generation]:
    """The counted (non-streamed) request and the same prompt streamed, for steps that accepted `steps` drafts each
    after the prefill's token. `responses`: how many steps each streamed response carries (default one each; a
    loaded server or stream_interval puts several in one)."""
    ids = [100]
    for i, a in enumerate(steps):
        ids += [i * 10 + k for k in range(a + 1)]
    accepted, drafted = sum(steps), drafts * len(steps)
    perf = {"total_accepted_draft_tokens": float(accepted), "total_draft_tokens": float(drafted)}
    plain = Generation("http", 0.0, end=1.0, ids=list(ids), perf=dict(perf), final=True)
    stream = Generation("http-stream", 0.0)
    ENGINE.absorb(stream, Output("p", [100], {"total_accepted_draft_tokens": 0.0, "total_draft_tokens": 0.0}), 0.1)
    at, done = 1, 0
    for n in responses or [1] * len(steps):
        chunk = steps[done : done + n]
        size = sum(a + 1 for a in chunk)
        done += n
        counters = {"total_accepted_draft_tokens": float(sum(steps[:done])), "total_draft_tokens": float(drafts * done)}
        ENGINE.absorb(stream, Output("x", ids[at : at + size], counters), 0.1 + done)
        at += size
    stream.final, stream.end = True, 9.0
    return plain, stream


def record(i: int, steps: list[int], responses=None, category="writing", tokens=40) -> AcceptanceRecord:
    plain, stream = served(steps, responses)
    rec = AcceptanceRecord.from_generation(plain, i, stream, prompt=f"p{i}")
    assert rec is not None
    return AcceptanceRecord(**{**rec.to_dict(), "category": category, "prompt_tokens": tokens})


def test_a_response_that_carries_two_steps_is_not_read_as_one_step():
    # a loaded server's stream: steps accepting 3 and 2 drafts arrive in one response of 7 tokens
    rec = record(0, [5, 3, 2, 4], responses=[1, 2, 1])
    assert rec.steps == 4 and rec.steps_from == "counters"  # the counters' steps: 15 tokens - 14 accepted - 1
    assert rec.acceptance_length == pytest.approx(1 + 14 / 4)
    assert rec.accepted_per_step is None and "carries 2 steps" in rec.per_step_note
    # one response per step: its steps, from each response's own counters
    assert record(1, [5, 3, 2, 4]).accepted_per_step == [5, 3, 2, 4]


def test_a_step_cut_short_and_an_empty_final_response_keep_the_steps():
    plain, stream = served([5, 5])
    # max_tokens cut the last step to 2 tokens: its 5 accepted drafts count (the counter), 4 tokens never sent
    stream.chunks[-1].ids = stream.chunks[-1].ids[:2]
    stream.ids = stream.ids[:-4]
    plain.ids = plain.ids[:-4]
    ENGINE.absorb(stream, Output("", [], dict(stream.perf)), 9.0)  # a FINAL response with no tokens
    rec = AcceptanceRecord.from_generation(plain, 0, stream)
    assert rec.accepted_per_step == [5, 5] and rec.steps == 2 and rec.steps_from == "stream"


def test_a_stream_that_drafted_otherwise_still_gives_its_steps():
    """The streamed run of a prompt accepted 7 drafts in 3 steps where the counted run accepted 8 in 2 (the same 11
    tokens: speculation is lossless, the drafts may differ from run to run). AL counts the counted run's steps;
    per-position acceptance takes the streamed run's, and does not vanish for the whole set."""
    plain, stream = served([4, 0, 3])
    plain.perf = {"total_accepted_draft_tokens": 8.0, "total_draft_tokens": 10.0}
    odd = AcceptanceRecord.from_generation(plain, 0, stream, prompt="coding-function")
    assert odd.steps == 2 and odd.steps_from == "counters" and odd.acceptance_length == pytest.approx(5.0)
    assert odd.accepted_per_step == [4, 0, 3] and "drafted otherwise" in odd.per_step_note
    others = [record(i, [5, 2]) for i in range(1, 11)]
    s = summarize_acceptance([odd, *others])
    assert s.per_position_requests == 11 and s.histogram == [1, 0, 10, 1, 1, 10]


def the_demo_run_under_load() -> list[AcceptanceRecord]:
    """Eleven requests as the demo's bundled set has; one coding prompt's stream arrived with two steps in one
    response (the run the issue saw); no step of any request accepted all 5 drafts."""
    records = [record(i, [4, 2, 3, 0, 4], category=("coding" if i < 3 else "writing")) for i in range(11)]
    records[1] = record(1, [4, 2, 3, 0, 4], responses=[1, 2, 1, 1], category="coding", tokens=60)
    return records


def test_one_odd_request_leaves_per_position_acceptance_to_the_others():
    records = the_demo_run_under_load()
    s = summarize_acceptance(records, DEPTH)
    assert s.per_position_requests == 10 and s.requests == 11
    assert s.per_position == pytest.approx([0.8, 0.8, 0.6, 0.4, 0.0])  # positions 1..5, none reached 5
    assert s.histogram == [10, 0, 10, 10, 20, 0]
    note = acceptance.per_position_note(records, s)
    assert note.startswith("per-position acceptance from 10 of 11 requests") and "p1: response 3 carries 2" in note


def test_every_group_row_has_a_cell_for_every_position_of_the_chain():
    records = the_demo_run_under_load()
    records.append(record(20, [1, 1], responses=[2], category="math", tokens=900))  # its only request coalesced
    groups = acceptance.grouped(records, DEPTH)
    s = summarize_acceptance(records, DEPTH)
    details = {
        "interval": {"confidence": 0.95, "resamples": 2000},
        "positions": DEPTH,
        "by_category": [g.to_dict() for g in groups["by_category"]],
        "by_context_length": [g.to_dict() for g in groups["by_context_length"]],
        "per_position_note": acceptance.per_position_note(records, s),
    }
    assert [len(g["per_position"]) for g in details["by_category"] if g["per_position"]] == [DEPTH, DEPTH]
    rows = [line for line in acceptance_group_lines(details) if line.startswith("|") and "---" not in line]
    headers = [r for r in rows if r.startswith("| category") or r.startswith("| context length")]
    assert all(h.rstrip(" |").endswith("pos 5") for h in headers)
    assert len({r.count(" | ") for r in rows}) == 1  # never ragged: every row as many cells as its header
    math = next(r for r in rows if r.startswith("| math "))
    assert math.count("| – ") == DEPTH  # the group whose streams gave no steps: a dash per position
    said = acceptance_group_lines(details)
    assert any(re.match(r"^Per-position acceptance from 10 of 12 requests \(p1: .*; p20: ", line) for line in said)


@pytest.mark.parametrize(
    "recipe, depth",
    [
        ("recipes/demo.yaml", 5),  # a chain of 5
        ("recipes/reference/eagle.yaml", 4),  # a 16-node tree 4 levels deep
        ("recipes/reference/medusa.yaml", None),  # its choices' longest path (read below)
        ("recipes/reference/lookahead.yaml", None),  # its n-gram less one
        ("recipes/reference/draft_target.yaml", None),  # its drafts per round
    ],
)
def test_positions_are_the_deepest_a_step_can_accept(recipe, depth):
    spec = load_build(recipe, check_files=False).spec
    method = spec.params
    expected = {
        "medusa": lambda: max(len(p) for p in spec.tree.choices),
        "lookahead": lambda: method.ngram_size - 1,
        "draft_target": lambda: method.num_draft_tokens,
    }
    assert spec.accept_depth == (depth if depth is not None else expected[spec.method]())
