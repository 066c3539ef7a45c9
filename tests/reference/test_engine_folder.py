"""Engine folders: TensorRT-LLM-shaped config, weights with sha256, atomic writes, clear errors."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from specbuild.errors import UserError
from specbuild.reference import engine_folder
from specbuild.reference.engine_folder import SpeculativeDecodingMode, build_engine, load_engine

LIMITS = dict(max_batch_size=4, max_input_len=32, max_seq_len=100, max_num_tokens=64, max_draft_len=5)


def _build(tmp_path, models, name="eng", **kw):
    args = dict(
        role="target",
        method="prompt_lookup",
        decoding={"max_draft_len": 5, "max_matching_ngram_size": 2},
        model_dir=models["target"],
        dtype="float16",
        limits=LIMITS,
    )
    args.update(kw)
    return build_engine(tmp_path / name, **args)


def test_round_trip(tmp_path, models):
    messages = []
    folder = _build(tmp_path, models, progress=messages.append)
    config = json.loads((folder / "config.json").read_text())
    hf = json.loads((models["target"] / "config.json").read_text())

    assert config["version"].startswith("specbuild-reference-")
    pre, build, sb = config["pretrained_config"], config["build_config"], config["specbuild"]
    assert pre["architecture"] == "LlamaForCausalLM" and pre["dtype"] == "float16"
    for ours, theirs in [
        ("vocab_size", "vocab_size"),
        ("hidden_size", "hidden_size"),
        ("num_hidden_layers", "num_hidden_layers"),
        ("num_key_value_heads", "num_key_value_heads"),
    ]:
        assert pre[ours] == hf[theirs]
    assert build["speculative_decoding_mode"] == 2  # DRAFT_TOKENS_EXTERNAL
    assert build["max_draft_len"] == 5
    assert build["max_seq_len"] == 100 + 5  # recipe max_seq_len + max_draft_len, as trtllm-build
    assert build["max_num_tokens"] == max(64, 4 * (5 + 1))
    assert sb["runtime"] == "reference" and sb["role"] == "target" and sb["method"] == "prompt_lookup"
    assert sb["files"]["tokenizer"] == {"path": "model"}
    for rel, digest in sb["files"]["model"]["sha256"].items():
        assert engine_folder.sha256_file(models["target"] / rel) == digest
    assert messages and not list(tmp_path.glob(".*partial*"))

    engine = load_engine(folder, decoding_overrides={"max_draft_len": 3})
    assert engine.decoding == {"max_draft_len": 3, "max_matching_ngram_size": 2}
    assert engine.mode == SpeculativeDecodingMode.DRAFT_TOKENS_EXTERNAL and engine.accepts_external_drafts
    assert engine.limits.requested_max_seq_len == 100 and engine.limits.max_seq_len == 105
    assert engine.decoding_method == "prompt_lookup"
    assert engine.model.vocab_size == 128


def test_modes_and_sequence_slack(tmp_path, models):
    eagle = _build(
        tmp_path,
        models,
        "eagle",
        method="eagle",
        decoding={},
        pretrained_extra={
            "architecture": "EagleForCausalLM",
            "max_draft_len": 5,
            "num_eagle_layers": 4,
            "max_non_leaves_per_layer": 10,
        },
    )
    cfg = json.loads((eagle / "config.json").read_text())
    assert cfg["build_config"]["speculative_decoding_mode"] == 32
    assert cfg["build_config"]["max_seq_len"] == 100 + 5 + 4
    assert cfg["pretrained_config"]["architecture"] == "EagleForCausalLM"
    assert cfg["pretrained_config"]["num_eagle_layers"] == 4 and cfg["pretrained_config"]["max_draft_len"] == 5

    draft = _build(tmp_path, models, "draft", role="draft", method="draft_target", decoding={"num_draft_tokens": 4})
    cfg = json.loads((draft / "config.json").read_text())
    assert cfg["build_config"]["speculative_decoding_mode"] == 1 and cfg["build_config"]["max_draft_len"] == 0
    assert cfg["build_config"]["max_seq_len"] == 100
    assert load_engine(draft).decoding_method == "autoregressive"

    for method, mode in [("medusa", 4), ("lookahead", 8), ("none", 1)]:
        cfg = json.loads((_build(tmp_path, models, method, method=method, decoding={}) / "config.json").read_text())
        assert cfg["build_config"]["speculative_decoding_mode"] == mode


def test_extra_dirs_and_separate_tokenizer(tmp_path, models):
    heads = tmp_path / "heads"
    heads.mkdir()
    (heads / "config.json").write_text('{"medusa_num_heads": 2}')
    tok = tmp_path / "tok"
    tok.mkdir()
    (tok / "tokenizer.json").write_text("{}")
    folder = _build(tmp_path, models, method="medusa", decoding={}, extra_dirs={"medusa": heads}, tokenizer_dir=tok)
    engine = load_engine(folder)
    assert (engine.folders["medusa"] / "config.json").read_text() == '{"medusa_num_heads": 2}'
    assert engine.tokenizer_dir == folder / "tokenizer"


def test_sha256_mismatch_and_missing_file(tmp_path, models):
    folder = _build(tmp_path, models)
    weights = folder / "model" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    weights.unlink()  # engine files are read-only copies
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))
    with pytest.raises(UserError, match=r"model\.safetensors: sha256 .* does not match"):
        load_engine(folder)
    weights.unlink()
    with pytest.raises(UserError, match=r"model\.safetensors: missing"):
        load_engine(folder)


def test_failed_build_leaves_nothing(tmp_path, models, monkeypatch):
    calls = []

    def failing_link(src, dst):
        calls.append(dst)
        if len(calls) == 2:
            raise OSError("disk full")
        return real_link(src, dst)

    real_link = engine_folder._copy_tree
    monkeypatch.setattr(engine_folder, "_copy_tree", failing_link)
    heads = tmp_path / "heads"
    heads.mkdir()
    (heads / "w.bin").write_bytes(b"x")
    out = tmp_path / "out"
    with pytest.raises(UserError, match="disk full"):
        _build(tmp_path, models, "out", method="medusa", decoding={}, extra_dirs={"medusa": heads})
    assert len(calls) == 2 and calls[0].exists() is False  # the partial folder was removed
    assert sorted(os.listdir(tmp_path)) == ["heads"] and not out.exists()


def test_failed_rebuild_keeps_the_previous_engine(tmp_path, models, monkeypatch):
    folder = _build(tmp_path, models)
    before = (folder / "config.json").read_text()
    monkeypatch.setattr(engine_folder, "_copy_tree", lambda src, dst: (_ for _ in ()).throw(OSError("boom")))
    with pytest.raises(UserError, match="boom"):
        _build(tmp_path, models, method="none", decoding={})
    assert (folder / "config.json").read_text() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["eng"]


def test_rebuild_replaces(tmp_path, models):
    _build(tmp_path, models)
    folder = _build(tmp_path, models, method="none", decoding={})
    assert json.loads((folder / "config.json").read_text())["specbuild"]["method"] == "none"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["eng"]


def test_not_a_reference_engine(tmp_path):
    trt = tmp_path / "trt"
    trt.mkdir()
    (trt / "config.json").write_text(json.dumps({"version": "1.2.0", "pretrained_config": {}, "build_config": {}}))
    (trt / "rank0.engine").write_bytes(b"")
    with pytest.raises(UserError, match="TensorRT-LLM engine .*1.2.0.*TensorRT-LLM runtime"):
        load_engine(trt)
    with pytest.raises(UserError, match="no such engine folder"):
        load_engine(tmp_path / "nowhere")
    other = tmp_path / "other"
    other.mkdir()
    (other / "config.json").write_text("{}")
    with pytest.raises(UserError, match="not a reference engine"):
        load_engine(other)
    (other / "config.json").write_text("{not json")
    with pytest.raises(UserError, match="cannot read"):
        load_engine(other)


def test_bad_arguments(tmp_path, models):
    with pytest.raises(UserError, match="role"):
        _build(tmp_path, models, role="teacher")
    with pytest.raises(UserError, match="method"):
        _build(tmp_path, models, method="beam")
    with pytest.raises(UserError, match="max_input_len=200 exceeds max_seq_len=100"):
        _build(tmp_path, models, limits={**LIMITS, "max_input_len": 200})
    with pytest.raises(UserError, match="does not exist"):
        _build(tmp_path, models, extra_dirs={"medusa": tmp_path / "absent"})
    assert not list(tmp_path.iterdir())


def test_engine_files_are_copies_not_links_to_the_checkpoint(tmp_path, models):
    """Editing an engine must never edit the user's checkpoint (issue #16: hard links shared the inode)."""
    folder = _build(tmp_path, models)
    source, copy = models["target"] / "model.safetensors", folder / "model" / "model.safetensors"
    assert os.stat(source).st_ino != os.stat(copy).st_ino
    assert not os.stat(copy).st_mode & 0o222  # read-only: an edit needs intent


def test_hub_cache_layout_is_followed_and_escaping_links_are_refused(tmp_path, models):
    """A downloaded model: snapshots/<rev>/<file> -> ../../blobs/<sha> (Hugging Face hub cache layout)."""
    repo = tmp_path / "models--org--tiny"
    snapshot, blobs = repo / "snapshots" / "abc123", repo / "blobs"
    snapshot.mkdir(parents=True)
    blobs.mkdir()
    for f in models["target"].iterdir():
        (blobs / f"sha-{f.name}").write_bytes(f.read_bytes())
        (snapshot / f.name).symlink_to(Path("..") / ".." / "blobs" / f"sha-{f.name}")
    folder = engine_folder.build_engine(
        tmp_path / "eng", role="target", method="none", model_dir=snapshot, dtype="float32", limits=LIMITS
    )
    weights = folder / "model" / "model.safetensors"
    assert weights.is_file() and not weights.is_symlink()
    assert load_engine(folder).model.vocab_size == 128

    outside = tmp_path / "elsewhere.txt"
    outside.write_text("secret")
    (snapshot / "notes.txt").symlink_to(outside)
    with pytest.raises(UserError, match="outside the checkpoint folder"):
        engine_folder.build_engine(
            tmp_path / "eng2", role="target", method="none", model_dir=snapshot, dtype="float32", limits=LIMITS
        )
    assert not (tmp_path / "eng2").exists()
