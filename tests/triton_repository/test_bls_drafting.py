"""The BLS's pure helpers (tensorrt_llm_bls/1/bls_drafting.py), imported the way the python backend does, and its
copy of the one prompt-lookup definition (specbuild/standalone/prompt_lookup_drafts.py) that the reference runtime uses."""

from __future__ import annotations

import importlib.util
import random

import pytest

from specbuild.standalone import prompt_lookup_drafts
from specbuild.standalone.prompt_lookup_drafts import DEFAULT_MAX_MATCHING_NGRAM_SIZE, propose
from specbuild.repository.engine.writer import SOURCES
from specbuild.methods import describe
from specbuild.runtimes import runtime_for

_spec = importlib.util.spec_from_file_location("bls_drafting", SOURCES / "tensorrt_llm_bls" / "bls_drafting.py")
drafting = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(drafting)


def test_accepted_prefix_and_stop_words():
    assert drafting.accepted_prefix([1, 2, 3], [1, 2, 9, 4]) == 2
    assert drafting.accepted_prefix([1, 2], [1, 2, 3]) == 2
    assert drafting.accepted_prefix([1, 2], [7]) == 0
    assert drafting.accepted_prefix([], [7]) == 0
    assert drafting.ends_with_stop_word([4, 5, 6], [[9], [5, 6]])
    assert not drafting.ends_with_stop_word([4, 5, 6], [[4, 5], []])


def test_round_seeds_differ_per_round_and_model_and_repeat_per_request():
    seeds = {(r, s): drafting.round_seed(7, r, s) for r in range(50) for s in (1, 2)}
    assert len(set(seeds.values())) == len(seeds)
    assert drafting.round_seed(7, 3, 1) == seeds[(3, 1)]
    assert drafting.round_seed(8, 3, 1) != seeds[(3, 1)]
    assert all(0 <= v < 2**63 for v in seeds.values())


def test_text_stream_deltas_concatenate_to_the_whole():
    # a byte-level decode where a two-byte character arrives split over two tokens
    pieces = {1: b"He", 2: b"llo ", 3: "é".encode()[:1], 4: "é".encode()[1:], 5: b"!"}

    def decode(tokens):
        return b"".join(pieces[t] for t in tokens).decode("utf-8", errors="replace")

    stream = drafting.TextStream(decode)
    deltas = [stream.push([1]), stream.push([1, 2, 3]), stream.push([1, 2, 3, 4]), stream.push([1, 2, 3, 4, 5])]
    assert deltas == ["He", "llo ", "é", "!"]  # the half character is held back, not sent as U+FFFD
    assert "".join(deltas) == decode([1, 2, 3, 4, 5])
    tail = drafting.TextStream(decode)
    assert tail.push([1, 3]) == "He" and tail.push([1, 3], final=True) == "\ufffd"  # flushed at the end


def test_the_bls_and_the_reference_runtime_use_this_definition(tmp_path):
    pytest.importorskip("torch")
    from repo_helpers import ROOT, recipe_from, write_engine_configs

    from specbuild.plan import Layout
    from specbuild.methods.prompt_lookup import decoder as reference
    from specbuild.recipe.schema import Recipe
    from specbuild.repository.engine.writer import write_repository

    assert reference.propose is propose
    recipe = recipe_from(ROOT / "recipes" / "reference" / "prompt_lookup.yaml")
    layout = Layout(tmp_path / "e", tmp_path / "r", tmp_path / "rep", recipe.name)
    write_engine_configs(recipe, layout)
    repo = write_repository(recipe, describe(recipe), layout, flavour=runtime_for(recipe))
    copy = repo / "tensorrt_llm_bls" / "1" / "prompt_lookup_drafts.py"
    assert copy.read_bytes() == open(prompt_lookup_drafts.__file__, "rb").read()
    spec = importlib.util.spec_from_file_location("prompt_lookup_drafts", copy)
    served = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(served)
    rng = random.Random(0)
    for _ in range(200):
        tokens = [rng.randrange(6) for _ in range(rng.randrange(1, 30))]
        n, k = rng.randrange(1, 4), rng.randrange(0, 6)
        assert served.propose(tokens, n, k) == propose(tokens, n, k)
    # one default everywhere: the recipe's and the one both the BLS and the runtime fall back to
    field = Recipe.model_validate(
        {"name": "x", "model": {"checkpoint": "m"}, "speculation": {"method": "prompt_lookup"}}
    ).speculation
    assert field.max_matching_ngram_size == served.DEFAULT_MAX_MATCHING_NGRAM_SIZE == DEFAULT_MAX_MATCHING_NGRAM_SIZE
