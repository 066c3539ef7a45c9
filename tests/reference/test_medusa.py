"""Medusa on the reference runtime: greedy output equals autoregressive decoding token for token (batch 1 and
in-flight mixed-length batches), the KV cache after tree-path compaction equals a fresh prefill, and sampled
output has the target's distribution (lossless recursive rejection sampling)."""

from __future__ import annotations

import pytest
import torch

from specbuild.errors import UserError
from specbuild.reference.decoder.batch import Batch
from specbuild.reference.decoder.executor import SamplingConfig
from specbuild.methods.medusa.decoder import MedusaDecoder
from specbuild.reference.decoder.sequence import Sequence
from tree_helpers import (
    SHIPPED_TINY,
    chi_square_pvalue,
    exact_second_third_token_distribution,
    fit_medusa,
    greedy_reference,
    make_engine,
    mixed_requests,
    requests,
    prompts,
    run,
    save_random_llama,
    second_third_token_histogram,
)

# Wide at depth 1 so that random heads still get drafts accepted on a small vocabulary.
CHOICES = (
    [[i] for i in range(6)]
    + [[i, j] for i in range(3) for j in range(3)]
    + [[0, 0, 0], [0, 0, 1], [0, 1, 0], [1, 0, 0]]
)
VOCAB = 24


@pytest.fixture(scope="module", autouse=True)
def _threads():
    torch.set_num_threads(1)


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    root = tmp_path_factory.mktemp("medusa")
    target = save_random_llama(root / "target", vocab=VOCAB, hidden=64, layers=2, seed=0)
    heads = fit_medusa(root / "heads", target, num_heads=3)  # a few seconds of training: drafts get accepted
    extra = {"num_medusa_heads": 3, "num_medusa_layers": 1}
    return {
        "ar": make_engine(root / "ar", target, "none"),
        "medusa": make_engine(
            root / "medusa",
            target,
            "medusa",  # bfloat16 heads: the drafter's dtype is free
            decoding={"medusa_choices": CHOICES, "draft_dtype": "bfloat16"},
            extra_dirs={"medusa": heads},
            pretrained_extra=extra,
            max_draft_len=len(CHOICES),
        ),
    }


def test_autoregressive_reference_is_plain_greedy(engines):
    model = engines["ar"].model
    for prompt in prompts(VOCAB, 4, seed=5):
        (res,) = run(engines["ar"], requests([prompt], 12), batch_size=1)
        assert res.output_ids == greedy_reference(model, prompt, 12)


@pytest.mark.parametrize("batch_size", [1, 8])
def test_greedy_medusa_equals_autoregressive(engines, batch_size):
    reqs = mixed_requests(VOCAB, 50, seed=7)
    expected = [r.output_ids for r in run(engines["ar"], reqs, batch_size=1)]
    results = run(engines["medusa"], mixed_requests(VOCAB, 50, seed=7), batch_size=batch_size)
    assert [r.output_ids for r in results] == expected
    accepted = sum(r.stats.total_accepted_draft_tokens for r in results)
    multi = sum(a >= 2 for r in results for a in r.stats.accepted_per_step)
    assert accepted > 50 and multi > 5  # paths of several tokens were accepted and compacted


def test_cache_after_tree_compaction_equals_fresh_prefill(engines):
    engine = engines["medusa"]
    method = MedusaDecoder(engine)
    seqs = [Sequence.start(i, req) for i, req in enumerate(requests(prompts(VOCAB, 4, seed=3), 30))]
    batch = Batch(seqs)
    for seq, out in zip(seqs, method.prefill(batch)):
        seq.append(out.tokens)
    accepted = 0
    for _ in range(6):
        for seq, out in zip(seqs, method.step(batch)):
            seq.append(out.tokens)
            accepted += out.accepted
        cache = batch.caches["target"]
        for r, seq in enumerate(seqs):
            n = len(seq.tokens) - 1
            assert cache.lengths[r] == n
            fresh = engine.model.new_cache(1)
            engine.model.forward(fresh, [seq.tokens[:-1]], logits="none")
            for mine, ref in zip(cache.store.layers, fresh.store.layers):
                torch.testing.assert_close(mine.keys[r, :, :n], ref.keys[0, :, :n], atol=1e-5, rtol=1e-5)
                torch.testing.assert_close(mine.values[r, :, :n], ref.values[0, :, :n], atol=1e-5, rtol=1e-5)
            # the hidden state kept for the heads is the one a fresh forward gives at the last cached position
            fresh_hidden = engine.model.decoder(input_ids=torch.tensor([seq.tokens[:-1]])).last_hidden_state[0, -1]
            torch.testing.assert_close(seq.state["medusa_hidden"], fresh_hidden, atol=1e-5, rtol=1e-5)
    assert accepted > 0


def test_sampling_is_lossless(engines):
    sampling = SamplingConfig(temperature=0.9, top_k=12, top_p=0.95)
    prompt = prompts(VOCAB, 1, seed=11)[0]
    samples = 3000
    counts = second_third_token_histogram(engines["medusa"], prompt, sampling, samples)
    expected = samples * exact_second_third_token_distribution(engines["ar"].model, prompt, sampling)
    assert chi_square_pvalue(counts, expected) > 1e-3


def test_typical_acceptance_runs_and_is_opt_in(engines, tmp_path):
    engine = engines["medusa"]
    engine.decoding["medusa_acceptance"] = "typical"
    try:
        results = run(
            engine, requests(prompts(VOCAB, 4, seed=2), 10, SamplingConfig(temperature=0.7, seed=3)), batch_size=4
        )
        assert all(len(r.output_ids) == 10 for r in results)
    finally:
        engine.decoding.pop("medusa_acceptance")
    engine.decoding["medusa_acceptance"] = "nope"
    try:
        with pytest.raises(UserError, match="medusa_acceptance"):
            MedusaDecoder(engine)
    finally:
        engine.decoding.pop("medusa_acceptance")


def test_choices_deeper_than_heads_are_a_user_error(engines):
    engine = engines["medusa"]
    with pytest.raises(UserError, match="medusa_choices"):
        MedusaDecoder(engine, decoding={"medusa_choices": [[0], [0, 0], [0, 0, 0], [0, 0, 0, 0]]})


@pytest.mark.skipif(not (SHIPPED_TINY / "medusa").is_dir(), reason="checkpoints/tiny (the zoo) is not built yet")
@pytest.mark.parametrize("batch_size", [1, 8])
def test_greedy_medusa_on_shipped_tiny_model(tmp_path, batch_size):
    target = SHIPPED_TINY / "target"
    import json

    heads_cfg = json.loads((SHIPPED_TINY / "medusa" / "config.json").read_text())
    extra = {"num_medusa_heads": heads_cfg["medusa_num_heads"], "num_medusa_layers": heads_cfg["medusa_num_layers"]}
    ar = make_engine(tmp_path / "ar", target, "none", max_seq_len=256, max_input_len=128)
    med = make_engine(
        tmp_path / "medusa",
        target,
        "medusa",
        extra_dirs={"medusa": SHIPPED_TINY / "medusa"},
        pretrained_extra=extra,
        max_seq_len=256,
        max_input_len=128,
    )
    vocab = ar.vocab_size
    reqs = mixed_requests(vocab, 50, seed=21, max_new=32)
    expected = [r.output_ids for r in run(ar, reqs, batch_size=8)]
    results = run(med, mixed_requests(vocab, 50, seed=21, max_new=32), batch_size=batch_size)
    assert [r.output_ids for r in results] == expected
    # trained heads: drafts are really accepted (catches a head/offset mix-up that exactness alone would not)
    steps = sum(r.stats.steps for r in results)
    assert sum(r.stats.total_accepted_draft_tokens for r in results) / steps > 0.5
