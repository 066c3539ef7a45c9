"""`draft_vocab_size`: drafters (draft-target's draft model, Medusa heads, EAGLE-1/2's head) score only the token
ids [0, N).

Lossless by construction (the target verifies over its whole vocabulary): greedy outputs equal autoregressive
decoding even when the subset is too small to hold the target's choices, and speculative sampling with a draft
restricted to 10 of 16 ids keeps the target's distribution (the chi-square test of test_sampling_lossless, whose
target puts mass on the ids the draft never proposes: they can only come from residuals and bonus tokens).
"""

from __future__ import annotations

import pytest
import torch
from test_sampling_lossless import CONFIGS, LIMITS as SAMPLING_LIMITS, P_REJECT, exact_law, generate, p_values
from zoo_engines import build_draft, build_target, has_extras

from specbuild.errors import UserError
from specbuild.reference.decoder.drafters import DraftVocabHead, draft_vocab_size

LIMITS = dict(max_batch_size=4, max_input_len=96, max_seq_len=160, max_num_tokens=2048)
EAGLE_CHOICES = [[0], [1], [0, 0], [0, 1], [0, 0, 0]]
MEDUSA_CHOICES = [[0], [1], [0, 0], [0, 1], [1, 0], [0, 0, 0]]


def test_head_scores_the_prefix_and_masks_the_rest():
    torch.manual_seed(0)
    weight = torch.randn(32, 8)
    hidden = torch.randn(3, 8)
    head = DraftVocabHead(weight, 20)
    logits = head(hidden)
    assert logits.shape == (3, 32) and logits.dtype == torch.float32
    torch.testing.assert_close(logits[:, :20], hidden @ weight[:20].T)
    assert torch.isinf(logits[:, 20:]).all() and (logits[:, 20:] < 0).all()
    log_probs = head.log_probs(hidden)
    torch.testing.assert_close(log_probs.exp().sum(-1), torch.ones(3))
    torch.testing.assert_close(DraftVocabHead(weight)(hidden), hidden @ weight.T)  # n = V: the plain lm_head
    assert draft_vocab_size({}, 32, "x") == 32 and draft_vocab_size({"draft_vocab_size": 0}, 32, "x") == 32
    assert draft_vocab_size({"draft_vocab_size": "12"}, 32, "x") == 12
    for bad in (33, -1, "half"):
        with pytest.raises(UserError, match="draft_vocab_size"):
            draft_vocab_size({"draft_vocab_size": bad}, 32, "engine/config.json: specbuild.decoding")


@pytest.fixture(scope="module")
def zoo(shipped_tiny, tmp_path_factory):
    root = tmp_path_factory.mktemp("draft-vocab")
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
        ),
        "draft": build_draft(shipped_tiny, root / "draft", LIMITS),
    }
    for n in (2048, 64):
        folders[f"draft_target/{n}"] = build_target(
            shipped_tiny,
            root / f"dt{n}",
            method="draft_target",
            decoding={"num_draft_tokens": 4, "draft_vocab_size": n},
            max_draft_len=4,
            extra={},
            pretrained={},
            limits=LIMITS,
        )
        if has_extras(shipped_tiny, {"medusa": "medusa"}):
            folders[f"medusa/{n}"] = build_target(
                shipped_tiny,
                root / f"medusa{n}",
                method="medusa",
                decoding={"medusa_choices": MEDUSA_CHOICES, "draft_vocab_size": n},
                max_draft_len=len(MEDUSA_CHOICES),
                extra={"medusa": "medusa"},
                pretrained=None,
                limits=LIMITS,
            )
        if has_extras(shipped_tiny, {"eagle": "eagle"}):
            for label, decoding in (
                ("eagle1", {"eagle_choices": EAGLE_CHOICES}),
                ("eagle2", {"eagle_use_dynamic_tree": True, "eagle_dynamic_tree_max_top_k": 2}),
            ):
                folders[f"{label}/{n}"] = build_target(
                    shipped_tiny,
                    root / f"{label}{n}",
                    method="eagle",
                    decoding={**decoding, "draft_vocab_size": n},
                    max_draft_len=6,
                    extra={"eagle": "eagle"},
                    pretrained={"num_eagle_layers": 3},
                    limits=LIMITS,
                )
    return folders


def _run(folders, label, prompts):
    from specbuild.reference.engine_folder import load_engine
    from specbuild.reference.decoder.executor import Executor
    from specbuild.reference.decoder.request import Request

    draft = load_engine(folders["draft"]) if label.startswith("draft_target") else None
    ex = Executor(load_engine(folders[label]), draft)
    results = ex.run([Request(input_ids=p, max_new_tokens=40) for p in prompts])
    return [r.output_ids for r in results], sum(r.stats.total_accepted_draft_tokens for r in results)


@pytest.fixture(scope="module")
def prompts(shipped_tiny):
    import inspect
    import json

    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(shipped_tiny / "tokenizer")
    source = inspect.getsource(json)
    return [tok(source[i * 700 : i * 700 + 700])["input_ids"][:64] for i in range(3)]


@pytest.mark.parametrize("label", ["draft_target", "medusa", "eagle1", "eagle2"])
def test_greedy_output_is_autoregressive_with_any_subset(zoo, prompts, label):
    torch.set_num_threads(1)
    if f"{label}/2048" not in zoo:
        pytest.skip(f"checkpoints/tiny has no {label} head folder in this checkout")
    reference, _ = _run(zoo, "autoregressive", prompts)
    accepted = {}
    for n in (2048, 64):
        outputs, accepted[n] = _run(zoo, f"{label}/{n}", prompts)
        assert outputs == reference, f"{label} with draft_vocab_size={n} changed the greedy output"
    assert accepted[2048] > 0 and accepted[2048] >= accepted[64], accepted  # drafts really were accepted


@pytest.mark.parametrize("config", list(CONFIGS))
def test_sampling_with_a_draft_subset_keeps_the_target_distribution(models, engine_factory, config):
    from specbuild.reference.decoder.executor import Executor

    target = models["target16"]
    ex = Executor(
        engine_factory(
            target, "draft_target", decoding={"num_draft_tokens": 3, "draft_vocab_size": 10}, **SAMPLING_LIMITS
        ),
        engine_factory(models["draft16"], "draft_target", role="draft", **SAMPLING_LIMITS),
    )
    law = exact_law(engine_factory(target, **SAMPLING_LIMITS).model, CONFIGS[config])
    assert float(law.sum((0, 1))[10:].sum()) > 0.05  # the target often picks ids the draft never proposes
    samples = generate(ex, CONFIGS[config])
    pv = p_values(samples, law)
    assert min(pv.values()) >= P_REJECT, f"draft_vocab_size=10 {config}: {pv}"
    assert any(t >= 10 for s in samples for t in s)
