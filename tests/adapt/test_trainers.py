"""Each draft kind's trainer on the tiny zoo, without a runtime: teacher rows made here from the tiny target's own
greedy continuations and hidden states, a few steps from the shipped head, saved and read back by the same loader
the runtimes use, in the same files as the shipped head; the same seed and steps give the same bytes."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import torch

from specbuild.adapt.heads import trainer_for
from specbuild.adapt.rows import Row, pad_rows
from specbuild.adapt.train import TrainingPlan, train_head
from specbuild.heads.eagle import load_eagle_head
from specbuild.heads.eagle3 import load_eagle3_head
from specbuild.heads.medusa import load_medusa_heads
from specbuild.load import load_build
from specbuild.zoo import teacher

ROOT = Path(__file__).resolve().parents[2]
RECIPES = ROOT / "recipes" / "reference"
KINDS = {
    "eagle": (RECIPES / "eagle.yaml", lambda folder, target: load_eagle_head(folder, target)),
    "medusa": (RECIPES / "medusa.yaml", lambda folder, target: load_medusa_heads(folder, target_model=target)),
    "eagle3": (RECIPES / "llmapi_eagle3.yaml", lambda folder, target: load_eagle3_head(folder, target)),
    "draft_target": (RECIPES / "draft_target.yaml", None),
}


@pytest.fixture(scope="module")
def target():
    from specbuild.zoo.quality import load_causal_lm

    torch.set_num_threads(1)
    return load_causal_lm(ROOT / "checkpoints" / "tiny" / "target")


def rows_for(target, layers, n: int, seed: int):
    """n teacher rows: 12-token prompts of random ids, continued greedily by the target for 8 tokens."""
    g = torch.Generator().manual_seed(seed)
    prompts = torch.randint(3, 4000, (n, 12), generator=g)
    tokens = teacher.greedy_continue(target, prompts, 8)
    final = teacher.final_features(target, tokens)
    captured = teacher.layer_outputs(target, tokens, layers) if layers else None
    rows = [Row(tokens[i].tolist(), 12, final[i], None if captured is None else captured[i]) for i in range(n)]
    return pad_rows(rows, target.lm_head.weight.detach().float(), 2)


def train_once(kind: str, target, folder: Path) -> tuple[dict, str]:
    build = load_build(KINDS[kind][0])
    trainer = trainer_for(build.spec)
    layers = trainer.captured_layers(build.spec, target)
    train_rows, dev_rows = rows_for(target, layers, 6, 0), rows_for(target, layers, 2, 1)
    plan = TrainingPlan(
        max_steps=3,
        max_minutes=60,
        learning_rate=1e-3,
        batch_size=2,
        eval_every=1,
        patience=10,
        depth=trainer.depth(build.spec),
        seed=5,
    )
    module = trainer.load(build.spec, target)
    trained = train_head(trainer, module, train_rows, dev_rows, target, plan)
    trainer.save(trained.module, folder, build.spec.params.path)
    digest = hashlib.sha256()
    for path in sorted(folder.iterdir()):
        digest.update(path.name.encode() + path.read_bytes())
    return {"trained": trained, "spec": build.spec}, digest.hexdigest()


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_head_trains_from_its_weights_and_is_saved_as_it_came(kind, target, tmp_path):
    first, digest_one = train_once(kind, target, tmp_path / "one")
    trained, spec = first["trained"], first["spec"]
    assert trained.steps == 3 and [d["step"] for d in trained.dev] == [0, 1, 2, 3]
    assert len(trained.losses) == 3 and all(torch.isfinite(torch.tensor(trained.losses)))
    old = Path(spec.params.path)
    new_files = {p.name for p in (tmp_path / "one").iterdir()}
    old_weights = {p.name for p in old.iterdir() if p.suffix in (".bin", ".safetensors")}
    assert old_weights <= new_files and "config.json" in new_files
    loader = KINDS[kind][1]
    if loader is not None:
        loader(tmp_path / "one", target)  # the loader the runtimes use takes it
    else:
        from transformers import AutoModelForCausalLM

        AutoModelForCausalLM.from_pretrained(str(tmp_path / "one"))
    _, digest_two = train_once(kind, target, tmp_path / "two")
    assert digest_one == digest_two, "the same rows, seed and steps gave other bytes"


@pytest.mark.parametrize("recipe", ["llmapi_mtp.yaml", "prompt_lookup.yaml", "none.yaml"])
def test_a_method_without_a_trained_draft_is_refused_naming_what_adapt_trains(recipe):
    # the trainers live in their packs (methods/<name>/trainer.py); a pack without one says why it has none
    from specbuild.errors import UserError
    from specbuild.methods import METHODS

    build = load_build(RECIPES / recipe)
    with pytest.raises(UserError) as caught:
        trainer_for(build.spec)
    message = str(caught.value)
    assert "leave adapt out" in message
    assert all(name in message for name, pack in METHODS.items() if pack.trainer is not None)
    if build.spec.speculative:
        assert f"speculation.method {build.spec.method}" in message
        assert METHODS[build.spec.method].untrained in message


def test_every_trainer_is_its_packs():
    from specbuild.methods import METHODS, load

    trained = {name for name, pack in METHODS.items() if pack.trainer is not None}
    assert trained == set(KINDS)
    for name in trained:
        assert type(load(METHODS[name], METHODS[name].trainer)).__module__ == f"specbuild.methods.{name}.trainer"
