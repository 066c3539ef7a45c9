"""The zoo builder's whole code path on the `micro` profile (tiny corpus slice, a few steps): < 1 min."""

from __future__ import annotations

import json

import pytest
import torch

from specbuild.zoo import ensure_profile, manifest, profile_folder_problems
import specbuild.zoo.build as build_mod
from specbuild.zoo.build import build
from specbuild.zoo.precision import BFLOAT16, DESCRIPTIONS, FLOAT32, resolve
from specbuild.zoo.profiles import MICRO


@pytest.fixture(scope="module")
def micro(tmp_path_factory):
    torch.set_num_threads(2)
    return build(MICRO, tmp_path_factory.mktemp("zoo") / "micro")


def test_layout(micro):
    names = {p.relative_to(micro).as_posix() for p in micro.rglob("*") if p.is_file()}
    assert {
        "manifest.json",
        "README.md",
        "tokenizer/tokenizer.json",
        "tokenizer/tokenizer_config.json",
        "target/config.json",
        "target/generation_config.json",
        "target/model.safetensors",
        "target/tokenizer.json",
        "draft/model.safetensors",
        "draft/tokenizer_config.json",
        "medusa/config.json",
        "medusa/medusa_lm_head.safetensors",
        "eagle/config.json",
        "eagle/pytorch_model.bin",
        "eagle3/config.json",
        "eagle3/model.safetensors",
        "pard/config.json",
        "pard/model.safetensors",
        "mtp-target/config.json",
        "mtp-target/model.safetensors",
        "mtp-target/tokenizer.json",
    } <= names
    assert not list(micro.parent.glob(".micro.partial-*"))


def test_manifest_matches_files(micro, tmp_path):
    import shutil

    recorded = manifest.read(micro)
    assert manifest.mismatches(micro, recorded) == []
    assert profile_folder_problems(micro, "micro") == []
    assert recorded["corpus"]["sha256"] and recorded["seeds"]["target_init"] == MICRO.seed
    assert recorded["precision"] == resolve("auto")
    assert recorded["training_precision"] == DESCRIPTIONS[recorded["precision"]]
    for name in ("target", "draft", "medusa", "eagle", "eagle3", "pard"):
        assert recorded["models"][name]["params"] > 0
        assert recorded["models"][name]["training"]["steps"] > 0
        assert recorded["stage_precision"][name] == recorded["precision"]
    q = recorded["quality"]
    assert len(q["medusa"]["top1_per_head"]) == MICRO.medusa_heads
    assert len(q["eagle"]["top1_per_step"]) == MICRO.eagle_depth
    assert len(q["eagle3"]["top1_per_step"]) == MICRO.eagle_depth and q["eagle3"]["layers"] == list(MICRO.eagle3.layers)
    assert recorded["models"]["eagle3"]["draft_vocab_size"] == MICRO.eagle3.draft_vocab
    assert len(q["mtp-target"]["top1_per_step"]) == MICRO.mtp_target.depth
    assert recorded["models"]["mtp-target"]["num_nextn_predict_layers"] == MICRO.mtp_target.mtp_layers
    assert q["draft_model"]["mean_acceptance_length"] >= 1.0
    # a changed byte is caught
    copy = shutil.copytree(micro, tmp_path / "copy")
    (copy / "README.md").write_text((copy / "README.md").read_text() + " ")
    assert manifest.mismatches(copy, recorded) == ["changed: README.md"]


def test_loads_with_transformers_and_heads_loaders(micro):
    from transformers import AutoTokenizer, LlamaForCausalLM

    from specbuild.heads.eagle import load_eagle_head
    from specbuild.heads.eagle3 import load_eagle3_head
    from specbuild.heads.medusa import load_medusa_heads

    for folder in ("tokenizer", "target", "draft"):
        tok = AutoTokenizer.from_pretrained(micro / folder)
        assert (tok.bos_token_id, tok.eos_token_id, tok.pad_token_id) == (1, 2, 2)
        assert tok("x = 1").input_ids[0] == 1
    assert (
        json.loads((micro / "target" / "tokenizer_config.json").read_text())["tokenizer_class"]
        == "PreTrainedTokenizerFast"
    )
    target = LlamaForCausalLM.from_pretrained(micro / "target")
    draft = LlamaForCausalLM.from_pretrained(micro / "draft")
    assert target.dtype == torch.float16 and draft.config.num_hidden_layers == 1
    heads = load_medusa_heads(micro / "medusa")
    eagle = load_eagle_head(micro / "eagle", target)
    x = torch.tensor([[1, 5, 6, 7]])
    with torch.no_grad():
        feats = target.float().model(input_ids=x).last_hidden_state
        assert heads(feats).shape == (MICRO.medusa_heads, 1, 4, MICRO.vocab_size)
        assert eagle(feats, x, torch.arange(4)[None]).shape == feats.shape
    eagle3 = load_eagle3_head(micro / "eagle3", target)
    assert eagle3.layers == MICRO.eagle3.layers and eagle3.draft_vocab_size == MICRO.eagle3.draft_vocab
    from specbuild.zoo.mtp_target import load_mtp_target

    mtp_model, (layer,) = load_mtp_target(micro / "mtp-target")
    assert type(mtp_model).__name__ == "DeepseekV3ForCausalLM" and mtp_model.config.num_nextn_predict_layers == 1
    assert layer.index == MICRO.mtp_target.shape.layers


def test_ensure_profile_builds_once_then_reuses(micro, tmp_path, monkeypatch):
    import shutil

    import specbuild.zoo.build as build_mod

    monkeypatch.setenv("SPECBUILD_ZOO_CACHE", str(tmp_path))
    shutil.copytree(micro, tmp_path / "micro")
    recorded = manifest.read(tmp_path / "micro")
    monkeypatch.setattr(build_mod, "build", lambda *a, **k: pytest.fail("should reuse the cached build"))
    assert ensure_profile("micro") == tmp_path / "micro"
    # a stale builder version forces a rebuild
    recorded["builder_version"] = -1
    (tmp_path / "micro" / "manifest.json").write_text(json.dumps(recorded))
    calls = []
    monkeypatch.setattr(build_mod, "build", lambda profile, folder, progress=None: calls.append(folder) or folder)
    assert ensure_profile("micro") == tmp_path / "micro" and calls == [tmp_path / "micro"]


def test_unknown_profile_is_a_user_error():
    from specbuild.errors import UserError

    with pytest.raises(UserError, match="unknown zoo profile"):
        ensure_profile("huge")


def test_deterministic_and_resumable(micro, tmp_path):
    """A fresh build with only the Medusa schedule changed reproduces every other file byte for byte;
    resuming from the first build retrains only Medusa and reproduces the fresh build's Medusa file."""
    import dataclasses

    changed = dataclasses.replace(MICRO, medusa_train=dataclasses.replace(MICRO.medusa_train, steps=3))
    fresh = build(changed, tmp_path / "fresh")
    resumed = build(changed, tmp_path / "resumed", resume_from=micro)
    a, b, c = (manifest.read(f)["files"] for f in (micro, fresh, resumed))
    weights = [n for n in a if n.endswith((".safetensors", ".bin", ".json")) and n != "manifest.json"]
    for name in weights:
        if name.startswith("medusa/") and name.endswith(".safetensors"):
            assert a[name]["sha256"] != b[name]["sha256"]
        else:
            assert a[name]["sha256"] == b[name]["sha256"], name
        assert b[name]["sha256"] == c[name]["sha256"], name
    assert manifest.read(resumed)["reused_stages"]["stages"] == [
        "target",
        "draft",
        "eagle",
        "eagle3",
        "pard",
        "mtp-target",
    ]
    assert manifest.read(fresh)["reused_stages"] is None


def test_resume_reuses_only_stages_trained_at_the_same_precision(micro):
    from specbuild.zoo.build import StageSource

    source = StageSource(micro)
    built_at = manifest.read(micro)["precision"]
    other = FLOAT32 if built_at == BFLOAT16 else BFLOAT16
    for stage in ("target", "draft", "medusa", "eagle", "eagle3", "pard"):
        assert source.has(stage, MICRO, built_at)
        assert not source.has(stage, MICRO, other)


def _without(micro, folder, stage="eagle3"):
    """A copy of the micro build as a zoo from before `stage` existed."""
    import shutil

    shutil.copytree(micro, folder)
    shutil.rmtree(folder / stage)
    recorded = manifest.read(folder)
    for section in ("models", "quality", "stage_versions", "stage_keys", "stage_precision", "timings_seconds"):
        recorded[section].pop(stage)
    manifest.write(folder, {k: v for k, v in recorded.items() if k not in ("files", "total_bytes")})
    return folder


def test_add_stage_trains_eagle3_into_an_existing_folder(micro, tmp_path):
    """add-stage leaves every other file byte for byte, records the stage's own precision, and at the build's
    precision reproduces the full build's eagle3 files exactly (the same teacher data from the folder's target)."""
    from click.testing import CliRunner

    from specbuild.zoo.__main__ import cli

    built = manifest.read(micro)
    other = FLOAT32 if built["precision"] == BFLOAT16 else BFLOAT16
    same = _without(micro, tmp_path / "same")
    result = CliRunner().invoke(cli, ["add-stage", "eagle3", "--zoo", str(same), "--precision", built["precision"]])
    assert result.exit_code == 0, result.output
    added = manifest.read(same)
    assert manifest.mismatches(same, added) == []
    for name, entry in built["files"].items():
        if name != "manifest.json" and name != "README.md":
            assert added["files"][name]["sha256"] == entry["sha256"], name
    assert added["stage_precision"]["eagle3"] == built["precision"]
    assert added["quality"]["eagle3"] == built["quality"]["eagle3"]

    later = _without(micro, tmp_path / "other")
    before = manifest.read(later)["files"]
    build_mod.add_stage(later, "eagle3", precision=other)
    after = manifest.read(later)
    assert {n: f for n, f in after["files"].items() if not n.startswith("eagle3/") and n != "README.md"} == {
        n: f for n, f in before.items() if n != "README.md"
    }
    assert after["stage_precision"] == {
        **{s: built["precision"] for s in ("target", "draft", "medusa", "eagle", "pard", "mtp-target")},
        "eagle3": other,
    }
    (entry,) = after["added_stages"]
    assert entry["stage"] == "eagle3" and entry["precision"] == other and "add-stage eagle3" in entry["command"]
    readme = (later / "README.md").read_text()
    assert "add-stage eagle3 --zoo checkpoints/micro" in readme and f"stage `eagle3`: {other}" in readme
    assert profile_folder_problems(later, "micro") == []


def test_add_stage_trains_the_mtp_target_into_an_existing_folder(micro, tmp_path):
    """The mtp-target stage from the folder's tokenizer and the corpus: at the build's precision the same bytes as the
    full build's, every other file unchanged, the README names the command."""
    built = manifest.read(micro)
    folder = _without(micro, tmp_path / "mtp", stage="mtp-target")
    before = manifest.read(folder)["files"]
    build_mod.add_stage(folder, "mtp-target", precision=built["precision"])
    after = manifest.read(folder)
    assert manifest.mismatches(folder, after) == []
    for name, entry in built["files"].items():
        if name != "README.md":
            assert after["files"][name]["sha256"] == entry["sha256"], name
    assert {n: f for n, f in after["files"].items() if not n.startswith("mtp-target/") and n != "README.md"} == {
        n: f for n, f in before.items() if n != "README.md"
    }
    assert after["quality"]["mtp-target"] == built["quality"]["mtp-target"]
    (entry,) = after["added_stages"]
    assert entry["stage"] == "mtp-target" and entry["teacher_data_seconds"] is None
    assert "add-stage mtp-target --zoo checkpoints/micro" in (folder / "README.md").read_text()


def test_add_stage_refuses_a_changed_folder(micro, tmp_path):
    import shutil

    from specbuild.errors import UserError

    folder = shutil.copytree(micro, tmp_path / "changed")
    (folder / "target" / "config.json").write_text("{}")
    with pytest.raises(UserError, match="does not match its manifest .*changed: target/config.json"):
        build_mod.add_stage(folder, "eagle3")
    with pytest.raises(UserError, match="only 'eagle3' or 'pard'"):
        build_mod.add_stage(folder, "medusa")


def test_add_stage_trains_pard_from_the_folders_draft(micro, tmp_path):
    """The PARD stage added later trains on the same teacher rows as in the full build (its first continued and
    corpus rows), so at the build's precision it reproduces the full build's pard/ files and figures exactly."""
    built = manifest.read(micro)
    folder = _without(micro, tmp_path / "pard", stage="pard")
    build_mod.add_stage(folder, "pard", precision=built["precision"])
    added = manifest.read(folder)
    for name, entry in built["files"].items():
        if name not in ("manifest.json", "README.md"):
            assert added["files"][name]["sha256"] == entry["sha256"], name
    assert added["quality"]["pard"] == built["quality"]["pard"]
    config = json.loads((folder / "pard" / "config.json").read_text())
    assert config["pard_token"] == MICRO.vocab_size and config["vocab_size"] == MICRO.vocab_size + 1
    assert "add-stage pard" in added["added_stages"][0]["command"]
    assert "tokenizer/ and target/ and draft/ of this folder" in added["added_stages"][0]["reused"]
