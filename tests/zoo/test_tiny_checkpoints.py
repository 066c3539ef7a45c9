"""The committed checkpoints/tiny folder: complete, loadable, matching its manifest, and actually trained."""

from __future__ import annotations


import pytest
import torch

from specbuild.zoo import COMMITTED, manifest

TINY = COMMITTED["tiny"]
MAX_BYTES = 40 * 1024 * 1024

# Held-out-style prompts written here (not from the corpus slice the models trained on).
PROMPTS = [
    "import os\nimport sys\n\n\ndef main(argv):\n    ",
    "class Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, item):\n        ",
    "def read_lines(path):\n    with open(path) as f:\n        ",
]


@pytest.fixture(scope="module")
def recorded():
    assert TINY.is_dir(), f"{TINY} is missing: build it with python -m specbuild.zoo build --profile tiny"
    return manifest.read(TINY)


@pytest.fixture(scope="module")
def models(recorded):
    from transformers import AutoTokenizer, LlamaForCausalLM

    tok = AutoTokenizer.from_pretrained(TINY / "target")
    target = LlamaForCausalLM.from_pretrained(TINY / "target", dtype=torch.float32).eval()
    draft = LlamaForCausalLM.from_pretrained(TINY / "draft", dtype=torch.float32).eval()
    return tok, target, draft


def test_every_file_matches_the_manifest(recorded):
    assert recorded is not None
    assert manifest.mismatches(TINY, recorded) == []
    assert recorded["profile"] == "tiny"


def test_size_budget(recorded):
    total = sum(p.stat().st_size for p in TINY.rglob("*") if p.is_file())
    assert total <= MAX_BYTES, f"{total / 1e6:.1f} MB > 40 MiB"


def test_each_folder_loads(models):
    from transformers import AutoTokenizer

    from specbuild.heads.eagle import load_eagle_head
    from specbuild.heads.medusa import load_medusa_heads

    tok, target, draft = models
    for folder in ("tokenizer", "target", "draft"):
        t = AutoTokenizer.from_pretrained(TINY / folder)
        assert len(t) == 4096 and t.eos_token_id == 2 and t.pad_token_id == 2
    assert target.config.num_hidden_layers == 4 and target.config.hidden_size == 256
    assert draft.config.num_hidden_layers == 1 and draft.config.hidden_size == 128
    assert 4_000_000 < sum(p.numel() for p in target.parameters()) < 7_000_000
    heads = load_medusa_heads(TINY / "medusa")
    eagle = load_eagle_head(TINY / "eagle", target)
    assert heads.num_heads >= 3 and heads.hidden_size == 256
    assert eagle.fc.weight.shape == (256, 512)


@torch.no_grad()
def test_target_is_trained_and_draft_agrees_with_it(models):
    """Computed here from the weights: the target predicts code far better than chance (ln 4096 = 8.3
    nats), and the distilled draft picks the target's greedy token most of the time."""
    tok, target, draft = models
    agree = total = 0
    for text in PROMPTS:
        ids = tok(text, return_tensors="pt").input_ids
        out = target.generate(ids, max_new_tokens=24, do_sample=False)
        continuation = out[:, ids.shape[1] :]
        assert continuation.numel() > 0
        loss = target(input_ids=ids, labels=ids).loss.item()
        assert loss < 5.0, f"target loss {loss:.2f} on {text!r}"
        target_next = target(input_ids=out).logits[0, ids.shape[1] - 1 : -1].argmax(-1)
        draft_next = draft(input_ids=out).logits[0, ids.shape[1] - 1 : -1].argmax(-1)
        agree += int((target_next == draft_next).sum())
        total += target_next.numel()
    assert agree / total > 0.5, f"draft agrees with the target on {agree}/{total} greedy tokens"


@torch.no_grad()
def test_heads_predict_the_targets_future_tokens(models):
    """On the target's own greedy continuations of the prompts above: Medusa head 0 guesses token t+2
    from the feature at t; the EAGLE head guesses it from (f_t, x_{t+1}) through the target's lm_head."""
    from specbuild.heads.eagle import load_eagle_head
    from specbuild.heads.medusa import load_medusa_heads

    tok, target, _ = models
    heads = load_medusa_heads(TINY / "medusa")
    eagle = load_eagle_head(TINY / "eagle", target)
    medusa_hits = eagle_hits = total = 0
    for text in PROMPTS:
        ids = tok(text, return_tensors="pt").input_ids
        p = ids.shape[1]
        seq = target.generate(ids, max_new_tokens=40, do_sample=False)
        n = seq.shape[1]
        feats = target.model(input_ids=seq).last_hidden_state
        truth = seq[0, p + 1 :]  # generated tokens after the first one
        head0 = heads(feats)[0, 0, p - 1 : n - 2].argmax(-1)  # from f_t, t = p-1 .. n-3
        f_hat = eagle(feats[:, :-1], seq[:, 1:], torch.arange(n - 1)[None])
        eagle_guess = (f_hat[0, p - 1 : n - 2] @ target.lm_head.weight.T).argmax(-1)
        medusa_hits += int((head0 == truth).sum())
        eagle_hits += int((eagle_guess == truth).sum())
        total += truth.numel()
    assert medusa_hits / total > 0.2, (medusa_hits, total)  # untrained heads (lm_head copies) score 0.0 here
    assert eagle_hits / total > 0.5, (eagle_hits, total)


def test_verify_command(recorded, tmp_path):
    import shutil

    from click.testing import CliRunner

    from specbuild.zoo.__main__ import cli

    ok = CliRunner().invoke(cli, ["verify", str(TINY)])
    assert ok.exit_code == 0 and "match manifest.json" in ok.output
    copy = shutil.copytree(TINY / "medusa", tmp_path / "tiny" / "medusa")
    shutil.copy(TINY / "manifest.json", tmp_path / "tiny" / "manifest.json")
    (copy / "config.json").write_text("{}")
    bad = CliRunner().invoke(cli, ["verify", str(tmp_path / "tiny")])
    assert bad.exit_code != 0 and "changed: medusa/config.json" in str(bad.exception)


def test_ensure_profile_returns_the_committed_folder(recorded):
    from specbuild.zoo import ensure_profile

    assert ensure_profile("tiny") == TINY
