"""Penalties, min_tokens and log probs on the reference runtime, for every method.

- The transforms on hand-computed numbers: TensorRT-LLM's kernel order (temperature, then repetition, presence and
  frequency penalties; the prompt counts), TorchSampler's order (penalties first), min_tokens banning the end id,
  and the reported log probabilities (full vocabulary for cum_log_probs, top-k-normalised for output_log_probs).
- Autoregressive decoding with penalties equals a plain loop written from the definition (fresh forwards, no cache).
- Greedy: every method (prompt lookup, draft-target, Medusa, EAGLE-1/2, EAGLE-3, lookahead, external drafts) yields
  the autoregressive tokens with the same penalties and min_tokens, token for token, and the same log probabilities,
  on the shipped tiny zoo (trained, so drafts are accepted), at batch 1 and in mixed batches.
- Sampling: chain (draft-target) and tree (Medusa) speculation with penalties keeps the penalised target
  distribution (chi-square against an exact law computed with an independent implementation of the penalties); the
  same test rejects a runtime whose verification forgets the penalties.
"""

from __future__ import annotations

import inspect
import json
import math
from collections import Counter
from dataclasses import replace

import pytest
import torch

from specbuild.reference.decoder import sampling
from specbuild.reference.decoder.executor import Executor, _Group
from specbuild.reference.decoder.request import Request
from specbuild.reference.decoder.sampling import SamplingConfig
from specbuild.reference.decoder.sequence import Sequence
from zoo_engines import METHODS as SHARED_METHODS
from zoo_engines import build_draft, build_target
from tree_helpers import chi_square_pvalue, fit_medusa, make_engine, prompts, save_random_llama

# ---------------------------------------------------------------- an independent statement of the definitions


def reference_processed(logits: torch.Tensor, context: list[int], cfg: SamplingConfig, *, banned=()) -> torch.Tensor:
    """TensorRT-LLM's penaltyKernels.cu `batchApplyPenalty`, token by token: temperature, then for every token of
    the context (prompt + output) repetition (divide positive / multiply negative), presence, frequency (x count);
    TorchSampler's order (penalties_before_temperature) scales last. `banned` tokens get -inf."""
    out = logits.float().clone()
    t = cfg.temperature if cfg.temperature > 0 else 1.0
    if not cfg.penalties_before_temperature:
        out = out / t
    for token, n in Counter(context).items():
        x = float(out[token])
        if cfg.repetition_penalty != 1.0:
            x = x * cfg.repetition_penalty if x < 0 else x / cfg.repetition_penalty
        x = x - cfg.presence_penalty - cfg.frequency_penalty * n
        out[token] = x
    if cfg.penalties_before_temperature:
        out = out / t
    for token in banned:
        out[token] = float("-inf")
    return out


def test_penalties_follow_the_kernel():
    logits = torch.tensor([2.0, -1.0, 0.5, 3.0])
    context = [0, 1, 1]  # token 0 once, token 1 twice, tokens 2 and 3 never
    cfg = SamplingConfig(repetition_penalty=2.0, presence_penalty=0.5, frequency_penalty=0.25)
    counts = torch.tensor([1.0, 2.0, 0.0, 0.0])
    # 2 / 2 - 0.5 - 0.25 = 0.25;  -1 * 2 - 0.5 - 0.5 = -3.0
    assert sampling.processed_logits(logits, cfg, counts).tolist() == [0.25, -3.0, 0.5, 3.0]
    hot = replace(cfg, temperature=2.0, top_k=1)  # greedy with a temperature: the kernel scales first
    assert sampling.processed_logits(logits, hot, counts).tolist() == [-0.25, -2.0, 0.25, 1.5]
    torch_order = replace(hot, penalties_before_temperature=True)
    assert sampling.processed_logits(logits, torch_order, counts).tolist() == [0.125, -1.5, 0.25, 1.5]
    for c in (cfg, hot, torch_order):
        assert torch.equal(sampling.processed_logits(logits, c, counts), reference_processed(logits, context, c))
    assert not SamplingConfig().penalized and cfg.penalized
    assert SamplingConfig(repetition_penalty=0.0).problems() and SamplingConfig(presence_penalty=math.inf).problems()


def test_log_probs_are_reported_as_tensorrt_llm_reports_them():
    processed = torch.log(torch.tensor([0.1, 0.4, 0.2, 0.3]))
    top2 = sampling.log_prob(processed, 3, SamplingConfig(temperature=1.0, top_k=2))
    assert math.isclose(top2.full, math.log(0.3), abs_tol=1e-6)
    assert math.isclose(top2.normalized, math.log(0.3 / 0.7), abs_tol=1e-6)  # log P(i | i in top-k)
    greedy = sampling.log_prob(processed, 1, SamplingConfig(temperature=1.0, top_k=1))
    assert math.isclose(greedy.full, math.log(0.4), abs_tol=1e-6) and greedy.normalized == 0.0
    top_p = sampling.log_prob(processed, 2, SamplingConfig(temperature=1.0, top_p=0.9))
    assert top_p.full == top_p.normalized  # the top-p kernel does not normalise
    assert top2.reported(True) == top2.normalized and top2.reported(False) == top2.full


def _seq(prompt, **request):
    return Sequence.start(1, Request(input_ids=prompt, max_new_tokens=20, **request))


def test_each_position_counts_the_tokens_on_its_own_path():
    seq = _seq([1, 2, 2], sampling=SamplingConfig(presence_penalty=1.0, frequency_penalty=0.5))
    logits = torch.zeros(3, 6)
    rows = seq.processed(logits, [[], [5], [5, 5]])
    assert rows[:, 2].tolist() == [-2.0, -2.0, -2.0]  # prompt tokens count (twice)
    assert rows[:, 5].tolist() == [0.0, -1.5, -2.0]  # draft tokens above the position count too
    assert rows[:, 1].tolist() == [-1.5] * 3 and rows[:, 0].tolist() == [0.0] * 3
    seq.append([5])
    assert seq.processed(logits[:1], [[]])[0, 5] == -1.5  # the same token, now generated


def test_min_tokens_bans_the_end_id_until_enough_were_generated():
    seq = _seq([1], end_id=4, min_tokens=3)
    logits = torch.zeros(4, 6)
    logits[:, 4] = 10.0  # the end id is everyone's favourite
    seq.append([0])  # one generated
    rows = seq.processed(logits, [[], [3], [3, 3], [3, 3, 3]])
    assert torch.isinf(rows[:2, 4]).all() and (rows[2:, 4] == 10.0).all()
    assert seq.choose(logits[0], []) != 4 and seq.choose(logits[0], [3, 3]) == 4
    assert _seq([1], end_id=4, min_tokens=1).context_dependent  # min_tokens 1 bans the end id at the first token
    assert not _seq([1], end_id=4).context_dependent and not _seq([1], min_tokens=3).context_dependent


# ---------------------------------------------------------------- autoregressive = the definition


SETTINGS = [  # (sampling, min_tokens): greedy requests, each penalty alone, together, with a temperature
    (SamplingConfig(), 0),
    (SamplingConfig(repetition_penalty=1.6), 0),
    (SamplingConfig(presence_penalty=1.5), 0),
    (SamplingConfig(frequency_penalty=0.8), 0),
    (SamplingConfig(), 12),
    (SamplingConfig(temperature=0.7, top_k=1, repetition_penalty=1.3, presence_penalty=0.6, frequency_penalty=0.4), 6),
    (SamplingConfig(repetition_penalty=0.8, frequency_penalty=-0.3), 0),  # values that encourage repetition
]


def penalised_requests(prompt_list, end_id: int, max_new: int = 24) -> list[Request]:
    out = []
    for i, prompt in enumerate(prompt_list):
        cfg, min_tokens = SETTINGS[i % len(SETTINGS)]
        out.append(
            Request(
                input_ids=list(prompt),
                max_new_tokens=max_new - (i % 3),
                sampling=cfg,
                end_id=end_id,
                min_tokens=min_tokens,
                return_log_probs=True,
            )
        )
    return out


def plain_loop(model, req: Request) -> tuple[list[int], list[float], float]:
    """Greedy decoding from the definition: a fresh forward over the whole text per token, the penalties of
    `reference_processed`, the end id banned while fewer than min_tokens were generated. Returns the tokens,
    each token's full-vocabulary log probability and the cumulative one (the end id's included)."""
    tokens, out, logps = list(req.input_ids), [], []
    cum = 0.0
    while len(out) < req.max_new_tokens:
        banned = [req.end_id] if len(out) < req.min_tokens else []
        processed = reference_processed(model.full_logits(tokens)[-1], tokens, req.sampling, banned=banned)
        token = int(processed.argmax())
        logp = float(torch.log_softmax(processed.double(), -1)[token])
        cum += logp
        if token == req.end_id:
            break
        tokens.append(token)
        out.append(token)
        logps.append(logp)
    return out, logps, cum


def test_autoregressive_with_penalties_is_the_definition(models, engine_factory):
    engine = engine_factory(models["target"], max_batch_size=4)
    reqs = penalised_requests(prompts(engine.vocab_size, 14, seed=2, max_len=16), end_id=7, max_new=16)
    results = Executor(engine).run(reqs)
    changed = 0
    for req, res in zip(reqs, results):
        tokens, logps, cum = plain_loop(engine.model, req)
        assert res.output_ids == tokens, req.sampling
        assert [lp.full for lp in res.log_probs] == pytest.approx(logps, abs=1e-4)
        assert res.cum_log_prob == pytest.approx(cum, abs=1e-3)
        plain_req = replace(req, sampling=SamplingConfig(), min_tokens=0)
        changed += tokens != plain_loop(engine.model, plain_req)[0]
    assert changed >= 6  # the penalties and min_tokens really changed most outputs


# ---------------------------------------------------------------- every method, greedy, on the shipped zoo

ZOO_LIMITS = dict(max_batch_size=4, max_input_len=96, max_seq_len=192, max_num_tokens=2048)
ZOO_METHODS = {  # the shared table plus EAGLE-3 (a head on a method-none engine), chain and tree
    **SHARED_METHODS,
    "eagle3": ("none", {"max_draft_len": 3}, 3, {"eagle3": "eagle3"}, {}),
    "eagle3_tree": (
        "none",
        {"max_draft_len": 3, "use_dynamic_tree": True, "dynamic_tree_max_top_k": 2, "max_total_draft_tokens": 5},
        5,
        {"eagle3": "eagle3"},
        {},
    ),
}


@pytest.fixture(scope="module")
def zoo(shipped_tiny, tmp_path_factory):
    """Engines over the shipped tiny zoo: the autoregressive baseline, one per method, the draft model."""
    from transformers import AutoTokenizer

    from specbuild.reference.engine_folder import load_engine

    root = tmp_path_factory.mktemp("penalties_zoo")
    engines = {
        label: load_engine(
            build_target(
                shipped_tiny,
                root / label,
                method=method,
                decoding=decoding,
                max_draft_len=draft_len,
                extra=extra,
                pretrained=pretrained,
                limits=ZOO_LIMITS,
            )
        )
        for label, (method, decoding, draft_len, extra, pretrained) in {
            "autoregressive": ("none", {}, 0, {}, {}),
            **ZOO_METHODS,
        }.items()
    }
    engines["draft"] = load_engine(build_draft(shipped_tiny, root / "draft", ZOO_LIMITS))
    tok = AutoTokenizer.from_pretrained(shipped_tiny / "tokenizer")
    sources = [inspect.getsource(m) for m in (json, inspect)]
    prompt_list = [tok(s[i * 700 : i * 700 + 700])["input_ids"][:80] for s in sources for i in range(7)]
    # the end id: a token the unpenalised model makes early and often, so min_tokens has work to do
    first = Executor(engines["autoregressive"]).run([Request(input_ids=p, max_new_tokens=8) for p in prompt_list])
    end_id = Counter(t for r in first for t in r.output_ids).most_common(1)[0][0]
    return engines, penalised_requests(prompt_list, end_id)


def zoo_executor(engines, label: str, batch: int) -> Executor:
    from specbuild.methods.eagle3.decoder import Eagle3Decoder

    engine = engines[label]
    ex = Executor(engine, engines["draft"] if label == "draft_target" else None)
    if label.startswith("eagle3"):  # the engine folder is method none with an eagle3 head (as in test_eagle3)
        ex._groups["engine"] = _Group(Eagle3Decoder(engine, None, ZOO_METHODS[label][1]))
    ex.limits = replace(ex.limits, max_batch_size=batch)
    return ex


def _fresh(reqs):
    return [replace(r, input_ids=list(r.input_ids)) for r in reqs]


def assert_same_decoding(got, expected, what):
    for i, (g, e) in enumerate(zip(got, expected)):
        assert g.output_ids == e.output_ids, f"{what}: request {i} differs"
        assert g.finish_reason == e.finish_reason, f"{what}: request {i}"
        assert [lp.full for lp in g.log_probs] == pytest.approx([lp.full for lp in e.log_probs], abs=2e-4), what
        assert [lp.normalized for lp in g.log_probs] == pytest.approx(
            [lp.normalized for lp in e.log_probs], abs=2e-4
        ), what
        assert g.cum_log_prob == pytest.approx(e.cum_log_prob, abs=2e-3), what


@pytest.fixture(scope="module")
def zoo_baseline(zoo):
    engines, reqs = zoo
    baseline = zoo_executor(engines, "autoregressive", 1).run(_fresh(reqs))
    unpenalised = zoo_executor(engines, "autoregressive", 1).run(
        [replace(r, sampling=SamplingConfig(), min_tokens=0) for r in _fresh(reqs)]
    )
    changed = sum(b.output_ids != u.output_ids for b, u in zip(baseline, unpenalised))
    assert changed >= len(reqs) // 2, "the penalties changed too few outputs for the comparison to mean much"
    end_id = reqs[0].end_id
    for req, res in zip(reqs, baseline):  # min_tokens holds: no end before it
        assert len(res.output_ids) >= min(req.min_tokens, req.max_new_tokens)
    assert any(r.finish_reason == "end_id" for r in baseline) and end_id is not None
    return baseline


@pytest.mark.parametrize("batch", [1, 4])
@pytest.mark.parametrize("label", list(ZOO_METHODS))
def test_every_method_equals_autoregressive_with_penalties(zoo, zoo_baseline, label, batch):
    engines, reqs = zoo
    results = zoo_executor(engines, label, batch).run(_fresh(reqs))
    assert_same_decoding(results, zoo_baseline, f"{label} at batch {batch}")
    assert sum(r.stats.total_accepted_draft_tokens for r in results) > 0, f"{label}: no draft accepted"


def test_external_drafts_equal_autoregressive_with_penalties(zoo, zoo_baseline):
    """The BLS path: the true continuation corrupted at a point, as draft_input_ids (with and without logits);
    the request's verification uses the penalties of each draft position's path."""
    engines, reqs = zoo
    ext = []
    for i, (req, base) in enumerate(zip(reqs, zoo_baseline)):
        k = 1 + i % 4  # up to the engine's max_draft_len
        good = i % (k + 1)
        drafts = (base.output_ids + [0] * k)[:good] + [
            (t + 1) % engines["draft"].vocab_size for t in (base.output_ids + [0] * k)[good:k]
        ]
        logits = (
            torch.randn(k, engines["draft"].vocab_size, generator=torch.Generator().manual_seed(i)) if i % 2 else None
        )
        ext.append(replace(req, input_ids=list(req.input_ids), draft_tokens=drafts, draft_logits=logits))
    results = Executor(engines["draft_target"]).run(ext)
    assert_same_decoding(results, zoo_baseline, "external drafts")
    assert sum(r.stats.accepted_per_step[0] for r in results) > len(reqs)


# ---------------------------------------------------------------- sampling with penalties stays lossless

PROMPT16 = [3, 5, 7, 1, 0, 2, 4, 6, 8, 9, 10, 11, 12, 13, 14, 15, 3, 5]
PENALISED = SamplingConfig(temperature=0.9, repetition_penalty=1.8, presence_penalty=0.7, frequency_penalty=0.5)
N = 3000
P_REJECT = 1e-3 / 3


def exact_law(model, prompt, cfg: SamplingConfig) -> torch.Tensor:
    """P(t1, t2, t3 | prompt) [V, V, V] under the penalised target, from fresh forwards and `reference_processed`."""
    vocab = model.vocab_size

    def p(prefix):
        processed = reference_processed(model.full_logits(prompt + prefix)[-1], prompt + prefix, cfg)
        return sampling.distribution(processed, cfg).double()

    with torch.inference_mode():
        p1 = p([])
        law = torch.zeros(vocab, vocab, vocab, dtype=torch.float64)
        for a in range(vocab):
            p2 = p([a])
            for b in range(vocab):
                law[a, b] = p1[a] * p2[b] * p([a, b])
    return law


def chain_p_values(samples, law) -> list[float]:
    counts = torch.zeros_like(law)
    for s in samples:
        counts[s[0], s[1], s[2]] += 1
    n = len(samples)
    return [
        chi_square_pvalue(counts.sum(2), n * law.sum(2)),
        chi_square_pvalue(counts.sum(0), n * law.sum(0)),
        chi_square_pvalue(counts.sum((0, 1)), n * law.sum((0, 1))),
    ]


@pytest.fixture(scope="module")
def chain_setup(models, engine_factory):
    limits = dict(max_batch_size=128, max_input_len=24, max_seq_len=32, max_num_tokens=4096, max_draft_len=3)
    target = engine_factory(models["target16"], "draft_target", decoding={"num_draft_tokens": 3}, **limits)
    draft = engine_factory(models["draft16"], "draft_target", role="draft", **limits)
    return target, draft, exact_law(target.model, PROMPT16, PENALISED)


def _chain_samples(target, draft):
    reqs = [
        Request(input_ids=list(PROMPT16), max_new_tokens=6, sampling=replace(PENALISED, seed=seed)) for seed in range(N)
    ]
    results = Executor(target, draft).run(reqs)
    assert sum(r.stats.total_accepted_draft_tokens for r in results) > N  # drafts were really accepted
    return [r.output_ids[:3] for r in results]


def test_draft_target_sampling_with_penalties_is_lossless(chain_setup):
    target, draft, law = chain_setup
    pv = chain_p_values(_chain_samples(target, draft), law)
    assert min(pv) >= P_REJECT, pv


def test_a_verification_without_penalties_is_detected(chain_setup, monkeypatch):
    """The harness has power: verify against the unpenalised target (the drafter still penalises) and it fails."""
    target, draft, law = chain_setup
    from specbuild.reference.decoder import verify

    original = verify.verify_tree

    def unpenalised(seq, tree, tokens, logits, proposal_probs=None):
        plain = replace(
            seq.request,
            sampling=replace(seq.sampling, repetition_penalty=1.0, presence_penalty=0.0, frequency_penalty=0.0),
        )
        return original(replace(seq, request=plain), tree, tokens, logits, proposal_probs)

    monkeypatch.setattr(verify, "verify_tree", unpenalised)
    pv = chain_p_values(_chain_samples(target, draft), law)
    assert min(pv) < P_REJECT, f"verification without penalties was not detected: {pv}"


def test_medusa_tree_sampling_with_penalties_is_lossless(tmp_path_factory):
    """A tree method: (t2, t3) of Medusa's output (the first step after the prefill drafts a depth-2 tree) against
    the exact penalised law."""
    root = tmp_path_factory.mktemp("penalised_medusa")
    vocab = 24
    target_dir = save_random_llama(root / "target", vocab=vocab, hidden=64, layers=2, seed=0)
    heads = fit_medusa(root / "heads", target_dir, num_heads=3)
    choices = [[i] for i in range(6)] + [[i, j] for i in range(3) for j in range(3)]
    engine = make_engine(
        root / "medusa",
        target_dir,
        "medusa",
        decoding={"medusa_choices": choices},
        extra_dirs={"medusa": heads},
        pretrained_extra={"num_medusa_heads": 3, "num_medusa_layers": 1},
        max_draft_len=len(choices),
    )
    cfg = SamplingConfig(temperature=0.9, top_k=12, repetition_penalty=1.5, presence_penalty=0.6, frequency_penalty=0.4)
    prompt = prompts(vocab, 1, seed=11)[0]
    model = engine.model

    def p(prefix):
        processed = reference_processed(model.full_logits(prompt + prefix)[-1], prompt + prefix, cfg)
        return sampling.distribution(processed, cfg).double()

    with torch.inference_mode():
        p1, joint = p([]), torch.zeros(vocab, vocab, dtype=torch.float64)
        for t1 in torch.nonzero(p1).flatten().tolist():
            p2 = p([t1])
            for t2 in torch.nonzero(p2).flatten().tolist():
                joint[t2] += p1[t1] * p2[t2] * p([t1, t2])
    samples = 2000
    reqs = [Request(input_ids=list(prompt), max_new_tokens=4, sampling=replace(cfg, seed=s)) for s in range(samples)]
    ex = Executor(engine)
    ex.limits = replace(ex.limits, max_batch_size=8)
    results = ex.run(reqs)
    counts = torch.zeros(vocab, vocab, dtype=torch.float64)
    for res in results:
        counts[res.output_ids[1], res.output_ids[2]] += 1
    assert sum(r.stats.accepted_per_step[0] > 0 for r in results) > samples // 10  # the tree really accepted
    assert chi_square_pvalue(counts, samples * joint) > 1e-3


def test_log_probs_of_sampled_tokens_are_the_targets(chain_setup):
    """Under sampling, each reported log probability is the penalised target's at that position (whether the
    token was an accepted draft, a residual draw or the bonus), for a top-k request the normalised one too."""
    target, draft, _ = chain_setup
    cfg = replace(PENALISED, top_k=6)
    reqs = [
        Request(input_ids=list(PROMPT16), max_new_tokens=5, sampling=replace(cfg, seed=s), return_log_probs=True)
        for s in range(12)
    ]
    results = Executor(target, draft).run(reqs)
    model = target.model
    for res in results:
        context = list(PROMPT16)
        for token, lp in zip(res.output_ids, res.log_probs):
            processed = reference_processed(model.full_logits(context)[-1], context, cfg)
            logp = torch.log_softmax(processed.double(), -1)
            assert lp.full == pytest.approx(float(logp[token]), abs=1e-4)
            assert lp.normalized == pytest.approx(
                float(logp[token] - torch.logsumexp(logp.topk(6).values, -1)), abs=1e-4
            )
            context.append(token)
        assert res.cum_log_prob == pytest.approx(sum(lp.full for lp in res.log_probs), abs=1e-4)
