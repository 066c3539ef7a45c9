"""MTP on the reference runtime: a DeepseekV3 target with an MTP layer in DeepSeek-V3's layout (random, and the shipped
tiny zoo's trained one). Greedy output equal to cache-free autoregressive decoding at batch 1 and in ragged in-flight
batches; the MTP layer's cache equal to a fresh recomputation after compaction; the shipped target's drafts accepted;
sampled requests keep the target's distribution; relaxed acceptance (TensorRT-LLM's rule, unit-tested on hand-made
distributions) accepts more drafts and is not lossless; the options' errors."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch

from specbuild.errors import UserError
from specbuild.reference.decoder.batch import Batch
from specbuild.reference.decoder.executor import SamplingConfig
from specbuild.reference.decoder.kv_cache import KVCache
from specbuild.methods.mtp.decoder import MtpDecoder
from specbuild.methods.mtp.decoder import DELTA, RelaxedAcceptance, relaxed_accept
from specbuild.reference.decoder.sequence import Sequence
from tree_helpers import (
    SHIPPED_TINY,
    chi_square_pvalue,
    exact_second_third_token_distribution,
    greedy_reference,
    make_engine,
    mixed_requests,
    prompts,
    requests,
    run,
    save_random_llama,
    second_third_token_histogram,
)

VOCAB = 48
CHAIN = {"max_draft_len": 3}


@pytest.fixture(scope="module", autouse=True)
def _threads():
    torch.set_num_threads(1)


def save_random_mtp_target(folder: Path, *, seed: int, fit_steps: int = 0) -> Path:
    """A random-init DeepseekV3ForCausalLM (MLA, dense MLPs) with one MTP layer saved in DeepSeek-V3's layout; with
    `fit_steps`, its MTP layer (only) trained for a few seconds on the target's own greedy text, so that drafts are
    accepted. Weights std 0.2: peaked next-token distributions, greedy ties far apart."""
    from types import SimpleNamespace

    from specbuild.zoo import data, mtp_target, teacher
    from specbuild.zoo.profiles import LlamaShape, MtpTargetSettings, Schedule
    from specbuild.zoo.train import run as train_run

    settings = MtpTargetSettings(
        shape=LlamaShape(hidden=48, layers=2, heads=2, intermediate=96),
        kv_lora_rank=24,
        qk_nope_head_dim=8,
        qk_rope_head_dim=8,
        v_head_dim=16,  # keys (latent 24) and values (rope 8) of different widths in the cache
        mtp_layers=1,
        mtp_weight=0.3,
        train=Schedule(steps=fit_steps, batch=16, lr=3e-3, warmup=5),
    )
    profile = SimpleNamespace(vocab_size=VOCAB, max_position_embeddings=512)
    tokenizer = SimpleNamespace(bos_token_id=None, eos_token_id=None, pad_token_id=None)
    model, layers = mtp_target.new_mtp_target(settings, profile, tokenizer, seed)
    with torch.no_grad():
        for p in list(model.parameters()) + list(layers.parameters()):
            if p.dim() == 2:
                p.normal_(0.0, 0.2)
    model.eval()
    if fit_steps:
        g = torch.Generator().manual_seed(seed)
        stream = torch.randint(0, VOCAB, (4000,), generator=g)
        rows = teacher.greedy_continue(model, data.prompts(stream, 96, 4, g), 36)
        for p in model.parameters():
            p.requires_grad_(False)

        def loss(step: int) -> torch.Tensor:
            batch = rows[torch.randint(0, rows.shape[0], (16,), generator=torch.Generator().manual_seed(step))]
            return mtp_target.mtp_losses(model, layers, batch)[1][0]

        train_run(list(layers.parameters()), loss, settings.train)
    layers.eval()
    mtp_target.save_mtp_target(
        model, layers, tokenizer, folder, torch.float32, lambda m, _t, f, _d: m.save_pretrained(str(f))
    )
    return folder


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("mtp")
    fitted = save_random_mtp_target(root / "fitted", seed=2, fit_steps=150)
    random_ = save_random_mtp_target(root / "random", seed=4)
    return {
        "fitted": make_engine(root / "e-fitted", fitted, "mtp", decoding=CHAIN),
        "random": make_engine(root / "e-random", random_, "mtp", decoding=CHAIN),
        "ar": make_engine(root / "e-ar", fitted, "none"),
        "ar-random": make_engine(root / "e-ar-random", random_, "none"),
    }


def executor(engine, decoding: dict, batch_size: int = 8):
    from specbuild.reference.decoder.executor import Executor, _Group

    ex = Executor(engine)
    ex.limits = replace(ex.limits, max_batch_size=batch_size)
    ex._groups["engine"] = _Group(MtpDecoder(engine, None, decoding))
    ex.method_name = MtpDecoder.name
    return ex


# ---------------------------------------------------------------- the target through the reference cache


def test_deepseek_target_through_the_cache_equals_a_fresh_forward(setup):
    """MLA caches a latent (kv_lora_rank wide) and a RoPE key (qk_rope_head_dim wide) as keys and values of different
    widths: ragged rows, a commit and a second forward give the cache-free logits."""
    model = setup["ar"].model
    assert model.implementation == "transformers"
    rows = [[1, 5, 7, 2, 9], [3, 4], [8, 8, 8]]
    cache = model.new_cache(3)
    first = model.forward(cache, rows, logits="all")
    cache.commit_all()
    assert cache.widths == (24, 8)
    second = model.forward(cache, [[11, 12], [13], [14, 15]], logits="all")
    for r, (row, more) in enumerate(zip(rows, [[11, 12], [13], [14, 15]])):
        full = model.full_logits(row + more)
        torch.testing.assert_close(first.logits[r, : len(row)], full[: len(row)], atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(second.logits[r, : len(more)], full[len(row) :], atol=1e-4, rtol=1e-4)


# ---------------------------------------------------------------- greedy: identical to autoregressive


@pytest.mark.parametrize("target", ["fitted", "random"])
@pytest.mark.parametrize("batch_size", [1, 6])
def test_greedy_equals_autoregressive(setup, target, batch_size):
    ar = "ar" if target == "fitted" else "ar-random"
    expected = [r.output_ids for r in run(setup[ar], mixed_requests(VOCAB, 24, seed=7), batch_size=1)]
    results = executor(setup[target], CHAIN, batch_size).run(mixed_requests(VOCAB, 24, seed=7))
    assert [r.output_ids for r in results] == expected
    if target == "fitted":  # multi-token steps were accepted and compacted
        assert sum(a >= 2 for r in results for a in r.stats.accepted_per_step) > 10


def test_a_draft_length_schedule_caps_the_chain(setup):
    """draft_len_schedule: 3 drafts while one request is in flight, 1 from two, none from four (plain steps whose
    hidden states the MTP layer catches up on later); the tokens stay autoregressive decoding's."""
    expected = [r.output_ids for r in run(setup["ar"], mixed_requests(VOCAB, 16, seed=8), batch_size=1)]
    results = executor(setup["fitted"], {**CHAIN, "draft_len_schedule": "1:3,2:1,4:0"}, 6).run(
        mixed_requests(VOCAB, 16, seed=8)
    )
    assert [r.output_ids for r in results] == expected
    drafted = {d for r in results for d in r.stats.drafted_per_step}
    assert {0, 1, 3} <= drafted and max(drafted) == 3


def test_greedy_equals_a_cache_free_reference(setup):
    model = setup["ar"].model
    reqs = requests(prompts(VOCAB, 4, seed=11), 24)
    outputs = executor(setup["fitted"], {"max_draft_len": 4}, 4).run(reqs)
    for req, out in zip(reqs, outputs):
        assert out.output_ids == greedy_reference(model, req.input_ids, 24)


def _step_manually(engine, n_steps=5, n_rows=4):
    method = MtpDecoder(engine, None, {**CHAIN, "draft_dtype": "float32"})
    seqs = [Sequence.start(i, req) for i, req in enumerate(requests(prompts(VOCAB, n_rows, seed=3), 40))]
    batch = Batch(seqs)
    for seq, out in zip(seqs, method.prefill(batch)):
        seq.append(out.tokens)
    for _ in range(n_steps):
        for seq, out in zip(seqs, method.step(batch)):
            seq.append(out.tokens)
        yield method, batch


def test_mtp_cache_after_compaction_equals_a_fresh_pass(setup):
    """The MTP layer's cache holds the entries (h_p, x_{p+1}) of the verified positions as if computed from scratch:
    h_p the target's final hidden state (after its final norm), the layer at position p."""
    engine = setup["fitted"]
    model = engine.model
    for method, batch in _step_manually(engine):
        head_kv = batch.caches["eagle"]
        for r, seq in enumerate(batch.seqs):
            m = head_kv.lengths[r]
            assert m >= len(seq.tokens) - 5  # caught up to the verified positions, less the last step's
            hidden = model.forward(model.new_cache(1), [seq.tokens[:m]], logits="none").hidden
            fresh = KVCache(method.head.config, 1)
            method.head_forward(fresh, [hidden[0]], [seq.tokens[1 : m + 1]], [list(range(m))])
            fresh.commit_all()
            mine, ref = head_kv.store.layers[0], fresh.store.layers[0]
            torch.testing.assert_close(mine.keys[r, :, :m], ref.keys[0, :, :m], atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(mine.values[r, :, :m], ref.values[0, :, :m], atol=1e-5, rtol=1e-5)


def test_a_reused_prefix_decodes_as_a_fresh_prefill(setup):
    """KV reuse: a request that repeats or extends a finished one starts from its prefix, the MTP layer reading the
    target's hidden states kept beside that prefix's KV; the tokens are autoregressive decoding's and the drafts as
    good as without reuse."""
    from specbuild.reference.decoder.executor import Executor
    from specbuild.reference.decoder.request import Request

    def conversation(ex):
        outputs, accepted, steps = [], 0, 0
        for prompt in prompts(VOCAB, 3, seed=21, min_len=12, max_len=20):
            first = None
            for text in (prompt, prompt, None):
                text = text if text is not None else prompt + first[:6]
                result = ex.run([Request(input_ids=text, max_new_tokens=20)])[0]
                first = first or result.output_ids
                outputs.append(result.output_ids)
                accepted += result.stats.total_accepted_draft_tokens
                steps += result.stats.steps
        return outputs, (accepted + steps) / steps

    reference, _ = conversation(Executor(setup["ar"]))
    fresh, fresh_al = conversation(Executor(setup["fitted"]))
    reusing = Executor(setup["fitted"], enable_kv_cache_reuse=True)
    reused, reused_al = conversation(reusing)
    assert fresh == reference and reused == reference
    assert reusing.prefix_store.hits >= 6
    assert fresh_al > 1.3 and reused_al >= 0.95 * fresh_al, (fresh_al, reused_al)


# ---------------------------------------------------------------- sampling: the target's distribution


def test_sampled_tokens_keep_the_target_distribution(setup):
    """Requests sampled at temperature 1 with top-k 3: the joint distribution of output tokens 2 and 3 (drafted and
    verified by rejection sampling in the first step) matches the target's exact one (chi-square)."""
    sampling = SamplingConfig(temperature=1.0, top_k=3)
    prompt = [3, 9, 27]
    exact = exact_second_third_token_distribution(setup["ar"].model, prompt, sampling)
    observed = second_third_token_histogram(setup["fitted"], prompt, sampling, samples=400)
    assert chi_square_pvalue(observed, exact * 400) > 1e-3


# ---------------------------------------------------------------- the shipped tiny MTP target


PYTHON_PROMPTS = [
    "import os\nimport sys\n\n\ndef main(argv):\n    ",
    "class Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, item):\n        ",
    "def read_lines(path):\n    with open(path) as f:\n        ",
]


def test_shipped_tiny_mtp_target_drafts_are_accepted(tmp_path):
    """The zoo's trained DeepseekV3 with its MTP layer: greedy output equals autoregressive decoding, and a good part
    of the drafts is accepted (the zoo's manifest records the held-out chain AL)."""
    from transformers import AutoTokenizer

    folder = SHIPPED_TINY / "mtp-target"
    tok = AutoTokenizer.from_pretrained(folder)
    ids = [tok(p).input_ids for p in PYTHON_PROMPTS]
    mtp = make_engine(tmp_path / "mtp", folder, "mtp", decoding={"max_draft_len": 3})
    ar = make_engine(tmp_path / "ar", folder, "none")
    out = run(mtp, requests(ids, 32), batch_size=3)
    assert [r.output_ids for r in out] == [r.output_ids for r in run(ar, requests(ids, 32), batch_size=1)]
    drafted = sum(d for r in out for d in r.stats.drafted_per_step)
    accepted = sum(a for r in out for a in r.stats.accepted_per_step)
    assert accepted / drafted > 0.2, (accepted, drafted)


# ---------------------------------------------------------------- relaxed acceptance


def _probs(rows: list[dict[int, float]], vocab: int = 8) -> torch.Tensor:
    """[len(rows), vocab] probabilities with the given masses (the rest spread over the other ids)."""
    out = torch.zeros(len(rows), vocab)
    for i, row in enumerate(rows):
        rest = (1.0 - sum(row.values())) / (vocab - len(row))
        out[i] = rest
        for token, p in row.items():
            out[i, token] = p
    return out


def test_relaxed_rule_is_tensorrt_llms():
    """mtpRelaxedAcceptanceKernel: a draft is accepted when it is one of the top-k whose probability is at least the
    top one's minus delta (the candidate scan stops at the first below it); the new token is the argmax."""
    probs = _probs([{1: 0.5, 2: 0.3, 3: 0.1}, {4: 0.6, 5: 0.38}, {6: 0.9}, {7: 0.5, 0: 0.4}])
    # delta 0: argmax only (strict greedy acceptance)
    acc = relaxed_accept([1, 4, 6], probs, 0.0, 3)
    assert (acc.tokens, acc.bonus) == ((1, 4, 6), 7)
    acc = relaxed_accept([2, 4, 6], probs, 0.0, 3)
    assert (acc.tokens, acc.bonus) == ((), 1)
    # delta 0.25: 2 (0.3 >= 0.5 - 0.25) accepted, then 5 (0.38 >= 0.6 - 0.25) accepted, then 6
    acc = relaxed_accept([2, 5, 6], probs, 0.25, 3)
    assert (acc.nodes, acc.tokens, acc.bonus) == ((1, 2, 3), (2, 5, 6), 7)
    # 3 (0.1 < 0.25) is out of the margin; top-k 1 allows the argmax only, whatever the margin
    assert relaxed_accept([3], probs, 0.25, 3).tokens == ()
    assert relaxed_accept([2], probs, 0.25, 1).tokens == ()
    # the scan stops at the first candidate below the threshold: top-k 3 with delta 0.45 reaches 3 (0.1 >= 0.05)
    assert relaxed_accept([3], probs, 0.45, 3).tokens == (3,)
    assert relaxed_accept([3], probs, 0.45, 2).tokens == ()


def test_thinking_phase_switches_the_margin():
    relaxed = RelaxedAcceptance(top_k=3, delta=0.25, begin=5, end=6)
    seq = Sequence.start(0, requests([[1, 2]], 4)[0])
    relaxed.start(seq, [1, 2])
    assert seq.state[DELTA] == 0.0
    relaxed.start(seq, [1, 5, 2, 6])  # the context phase counts begin tokens only (TensorRT-LLM's rule)
    assert seq.state[DELTA] == 0.25
    relaxed.observe(seq, [3, 6, 4])
    assert seq.state[DELTA] == 0.0
    relaxed.observe(seq, [6, 5])  # the last one seen wins
    assert seq.state[DELTA] == 0.25
    with pytest.raises(UserError, match="begin_thinking_phase_token=128798 is not a token id"):
        RelaxedAcceptance.from_decoding({"use_relaxed_acceptance_for_thinking": True}, "x", 48)
    with pytest.raises(UserError, match="relaxed_topk=0 must be >= 1"):
        RelaxedAcceptance.from_decoding(
            {"use_relaxed_acceptance_for_thinking": "true", "relaxed_topk": 0, "begin_thinking_phase_token": 1,
             "end_thinking_phase_token": 2}, "x", 48,
        )  # fmt: skip
    assert RelaxedAcceptance.from_decoding({"use_relaxed_acceptance_for_thinking": "false"}, "x", 48) is None


def test_relaxed_acceptance_accepts_more_and_is_not_lossless(setup):
    """Every prompt opens the thinking phase (it holds the begin token, which the target never emits): relaxed
    acceptance with top-k 8 and a margin of 1.0 takes any draft among the target's top 8, so more drafts are
    accepted per step than under greedy verification, and the output departs from greedy decoding."""
    begin, end = VOCAB - 1, VOCAB - 2
    relaxed = {
        **CHAIN,
        "use_relaxed_acceptance_for_thinking": True,
        "relaxed_topk": 8,
        "relaxed_delta": 1.0,
        "begin_thinking_phase_token": begin,
        "end_thinking_phase_token": end,
    }
    thinking = [[begin] + p for p in prompts(VOCAB - 2, 12, seed=5)]
    strict = executor(setup["fitted"], CHAIN, 6).run(requests(thinking, 24))
    loose = executor(setup["fitted"], relaxed, 6).run(requests(thinking, 24))
    greedy = run(setup["ar"], requests(thinking, 24), batch_size=1)
    assert [r.output_ids for r in strict] == [r.output_ids for r in greedy]
    assert [r.output_ids for r in loose] != [r.output_ids for r in greedy]

    def rate(results):
        return sum(a for r in results for a in r.stats.accepted_per_step) / sum(
            d for r in results for d in r.stats.drafted_per_step
        )

    assert rate(loose) > rate(strict)
    # outside the thinking phase (no begin token in the prompt, and none emitted) the margin is 0: greedy output
    plain = prompts(VOCAB - 2, 6, seed=9)
    off = executor(setup["fitted"], relaxed, 6).run(requests(plain, 24))
    ref = run(setup["ar"], requests(plain, 24), batch_size=1)
    for got, want in zip(off, ref):
        if begin not in want.output_ids:
            assert got.output_ids == want.output_ids


# ---------------------------------------------------------------- options and checkpoints


def test_errors_name_the_option_or_file(setup, tmp_path):
    engine = setup["fitted"]
    with pytest.raises(UserError, match="vanilla MTP"):
        MtpDecoder(engine, None, {"max_draft_len": 2, "use_mtp_vanilla": True})
    MtpDecoder(engine, None, {"max_draft_len": 1, "use_mtp_vanilla": True})  # one layer, one draft: the same pass
    with pytest.raises(UserError, match="max_draft_len=0 must be >= 1"):
        MtpDecoder(engine, None, {"max_draft_len": 0})
    llama = make_engine(
        tmp_path / "llama", save_random_llama(tmp_path / "l", vocab=VOCAB, hidden=32, layers=1, seed=1), "none"
    )
    with pytest.raises(UserError, match="no multi-token-prediction layers"):
        MtpDecoder(llama, None, CHAIN)
