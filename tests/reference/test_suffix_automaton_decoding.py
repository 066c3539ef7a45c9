"""Suffix-automaton drafting on the reference executor over the tiny zoo: lossless against autoregressive decoding
(one row, a batch, with a draft-length schedule), drafts from the row's own text, and, with the global pool, from a
finished request's text."""

from __future__ import annotations

import inspect
import json

import pytest
from zoo_engines import build_target

LIMITS = dict(max_batch_size=4, max_input_len=96, max_seq_len=192, max_num_tokens=2048)


@pytest.fixture(scope="module")
def engines(shipped_tiny, tmp_path_factory):
    root = tmp_path_factory.mktemp("sa")
    common = dict(extra={}, pretrained={}, limits=LIMITS)
    return {
        "host": build_target(
            shipped_tiny,
            root / "host",
            method="prompt_lookup",
            decoding={"max_draft_len": 4},
            max_draft_len=4,
            **common,
        ),
        "none": build_target(shipped_tiny, root / "none", method="none", decoding={}, max_draft_len=0, **common),
    }


@pytest.fixture(scope="module")
def prompts(shipped_tiny):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(shipped_tiny / "tokenizer")
    source = inspect.getsource(json)
    return [tok(source[i * 800 : i * 800 + 800])["input_ids"][:72] for i in range(4)]


def executor(folder, decoding=None):
    """An executor over the engine folder; with `decoding`, its method is the suffix-automaton decoder."""
    import torch

    from specbuild.reference.decoder.executor import Executor, _Group
    from specbuild.methods.suffix_automaton.decoder import SuffixAutomatonDecoder
    from specbuild.reference.engine_folder import load_engine

    torch.set_num_threads(1)
    engine = load_engine(folder)
    ex = Executor(engine)
    if decoding is not None:
        ex._groups["engine"] = _Group(SuffixAutomatonDecoder(engine, None, decoding))
    return ex


def requests(prompts, lengths=(12, 20, 28, 40)):
    """Requests of different lengths, so that the requests in flight (and a schedule's draft length) change."""
    from specbuild.reference.decoder.request import Request

    return [Request(input_ids=p, max_new_tokens=n) for p, n in zip(prompts, lengths)]


@pytest.mark.parametrize(
    "decoding",
    [
        {"max_draft_len": 4},
        {"max_draft_len": 3, "max_matching_ngram_size": 2},
        {"max_draft_len": 4, "enable_global_pool": True},
        {"max_draft_len": 4, "draft_len_schedule": "1:4,2:1,3:0"},
    ],
)
def test_lossless_batched(engines, prompts, decoding):
    plain = [r.output_ids for r in executor(engines["none"]).run(requests(prompts))]
    results = executor(engines["host"], decoding).run(requests(prompts))
    assert [r.output_ids for r in results] == plain
    assert sum(r.stats.total_draft_tokens for r in results) > 0


def test_the_global_pool_drafts_from_a_finished_request(engines, prompts):
    """The second request repeats the first's prompt: its own text has the prompt only, the first request's
    automaton holds the continuation it is about to generate."""
    alone, shared = (
        executor(engines["host"], {"max_draft_len": 4}),
        executor(engines["host"], {"max_draft_len": 4, "enable_global_pool": True}),
    )
    counts = {}
    for name, ex in (("alone", alone), ("shared", shared)):
        first, second = (ex.run(requests([prompts[0]]))[0] for _ in range(2))
        assert first.output_ids == second.output_ids
        counts[name] = second.stats.total_accepted_draft_tokens
    assert counts["shared"] > counts["alone"]
    method = shared._groups["engine"].method
    assert len(method.pool.held()) == 2  # the finished requests stay in the pool


def test_bad_pool_settings_are_refused(engines):
    from specbuild.errors import UserError

    with pytest.raises(UserError, match="max_matching_ngram_size must be > 0"):
        executor(engines["host"], {"max_draft_len": 4, "max_matching_ngram_size": 0})
    with pytest.raises(UserError, match="global_pool_size requires enable_global_pool"):
        executor(engines["host"], {"max_draft_len": 4, "global_pool_size": 64})
