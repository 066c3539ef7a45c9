"""The double itself enforces the real contract (so tests through it can fail the way a GPU run would).

Each expected behaviour is upstream's (the TensorRT-LLM file in the test name's comment).
"""

from __future__ import annotations

import json
import subprocess
import sys
import types
from pathlib import Path

import pytest


@pytest.fixture
def wheel(machine):
    import importlib

    for name in [m for m in sys.modules if m == "tensorrt_llm" or m.startswith("tensorrt_llm.")]:
        del sys.modules[name]
    models = importlib.import_module("tensorrt_llm.models")
    yield models
    for name in [m for m in sys.modules if m == "tensorrt_llm" or m.startswith("tensorrt_llm.")]:
        del sys.modules[name]


def test_medusa_needs_a_path_for_the_heads_dir(wheel, models):  # models/medusa/config.py
    with pytest.raises(TypeError):
        wheel.MedusaForCausalLm.from_hugging_face(
            str(models / "target"), "float16", speculative_model_dir=str(models / "medusa")
        )


def test_medusa_heads_key_quirk(wheel, models):  # models/medusa/config.py: looks for num_medusa_heads
    with pytest.raises(TypeError):  # None heads: range(None)
        wheel.MedusaForCausalLm.from_hugging_face(
            str(models / "target"), "float16", speculative_model_dir=models / "medusa"
        )
    m = wheel.MedusaForCausalLm.from_hugging_face(
        str(models / "target"),
        "bfloat16",
        speculative_model_dir=models / "medusa",
        speculative_config=types.SimpleNamespace(num_medusa_heads=3),
    )
    assert (m.config["num_medusa_heads"], m.config["max_draft_len"]) == (3, 63)  # 63 unless given
    # (models/medusa/config.py)
    # heads converted as float16 whatever dtype was asked (models/medusa/model.py)
    assert {dt for name, (dt, _) in m.weights.items() if name.startswith("medusa_heads.")} == {"float16"}
    assert m.config["dtype"] == "bfloat16"


def test_eagle_kwargs_and_four_layers(wheel, models):  # models/eagle/model.py
    base = dict(speculative_model_dir=models / "eagle")
    with pytest.raises(KeyError):
        wheel.EagleForCausalLM.from_hugging_face(
            str(models / "target"),
            "float16",
            **base,
            speculative_config=types.SimpleNamespace(num_eagle_layers=4, max_non_leaves_per_layer=10),
        )
    emb = dict(use_parallel_embedding=False, embedding_sharding_dim=0)
    with pytest.raises(AttributeError):
        wheel.EagleForCausalLM.from_hugging_face(
            str(models / "target"),
            "float16",
            **base,
            **emb,
            speculative_config={"num_eagle_layers": 4, "max_non_leaves_per_layer": 10},
        )
    with pytest.raises(IndexError):
        wheel.EagleForCausalLM.from_hugging_face(
            str(models / "target"),
            "float16",
            **base,
            **emb,
            speculative_config=types.SimpleNamespace(num_eagle_layers=3, max_non_leaves_per_layer=10),
        )
    m = wheel.EagleForCausalLM.from_hugging_face(
        str(models / "target"),
        "float16",
        **base,
        **emb,
        speculative_config=types.SimpleNamespace(num_eagle_layers=5, max_non_leaves_per_layer=10),
    )
    assert m.config["max_draft_len"] == 63
    assert sorted(n for n in m.weights if n.startswith("eagle_nets.")) == [
        f"eagle_nets.{i}.lm_head.weight" for i in range(4)
    ]  # the fifth net gets no weights


def test_float32_source_converts_to_float16(wheel, models):  # convert_checkpoint.py --dtype auto
    m = wheel.LLaMAForCausalLM.from_hugging_face(str(models / "target"), "auto")
    assert m.config["dtype"] == "float16"


def _checkpoint(tmp_path, wheel, models, **extra) -> Path:
    ckpt = tmp_path / "ckpt"
    m = wheel.LLaMAForCausalLM.from_hugging_face(str(models / "target"), "float16")
    m.config.update(extra)
    m.save_checkpoint(ckpt)
    return ckpt


def _trtllm_build(*args) -> subprocess.CompletedProcess:
    return subprocess.run(["trtllm-build", *args], capture_output=True, text=True)


def test_trtllm_build_rejects_unknown_mode_and_flags(machine, wheel, models, tmp_path):  # commands/build.py choices
    ckpt = _checkpoint(tmp_path, wheel, models)
    bad = _trtllm_build("--checkpoint_dir", str(ckpt), "--speculative_decoding_mode", "ngram")
    assert bad.returncode == 2 and "invalid choice: 'ngram'" in bad.stderr
    bad = _trtllm_build("--checkpoint_dir", str(ckpt), "--tp_size", "2")  # TP is fixed at conversion
    assert bad.returncode == 2 and "unrecognized arguments: --tp_size" in bad.stderr
    bad = _trtllm_build("--checkpoint_dir", str(ckpt), "--kv_cache_type", "blocked")
    assert bad.returncode == 2 and "Invalid value 'blocked'" in bad.stderr


def _engine(out: Path) -> dict:
    return json.loads((out / "config.json").read_text())["build_config"]


def test_trtllm_build_rewrites_limits(machine, wheel, models, tmp_path):  # build.py, builder.py
    ckpt = _checkpoint(tmp_path, wheel, models, architecture="EagleForCausalLM", num_eagle_layers=4, max_draft_len=63)
    out = tmp_path / "eng"
    r = _trtllm_build(
        "--checkpoint_dir",
        str(ckpt),
        "--output_dir",
        str(out),
        "--speculative_decoding_mode",
        "eagle",
        "--max_batch_size",
        "8",
        "--max_seq_len",
        "512",
        "--use_paged_context_fmha",
        "disable",
    )
    assert r.returncode == 0, r.stderr
    b = _engine(out)
    assert b["max_draft_len"] == 63  # taken from the checkpoint when --max_draft_len is 0
    assert b["max_seq_len"] == 512 + 63 + 4
    assert b["max_num_tokens"] == 8 * 512  # 8192 clipped to batch * seq, then >= 8 * 64
    assert b["plugin_config"]["use_paged_context_fmha"] is True  # forced on for EAGLE
    assert b["speculative_decoding_mode"] == 32 and b["kv_cache_type"] == "PAGED"
    assert "--gather_generation_logits is deprecated" in r.stdout  # always printed (build.py)


def test_trtllm_build_raises_max_num_tokens_for_drafts(machine, wheel, models, tmp_path):  # builder.py
    ckpt = _checkpoint(tmp_path, wheel, models)
    out = tmp_path / "eng"
    r = _trtllm_build(
        "--checkpoint_dir",
        str(ckpt),
        "--output_dir",
        str(out),
        "--speculative_decoding_mode",
        "draft_tokens_external",
        "--max_draft_len",
        "10",
        "--max_batch_size",
        "64",
        "--max_seq_len",
        "256",
        "--max_num_tokens",
        "100",
    )
    assert r.returncode == 0, r.stderr
    assert _engine(out)["max_num_tokens"] == 64 * 11


@pytest.mark.parametrize(
    "args, words",
    [
        (["--max_batch_size", "513"], "EAGLE requires max_batch_size <= 512"),
        (["--max_batch_size", "8", "--max_draft_len", "257"], "EAGLE requires max_draft_len <= 256"),
        (["--max_batch_size", "8", "--kv_cache_type", "continuous"], "EAGLE needs the paged KV cache"),
    ],
)
def test_trtllm_build_eagle_asserts(machine, wheel, models, tmp_path, args, words):  # builder.py
    ckpt = _checkpoint(tmp_path, wheel, models, architecture="EagleForCausalLM", num_eagle_layers=4, max_draft_len=63)
    r = _trtllm_build(
        "--checkpoint_dir",
        str(ckpt),
        "--output_dir",
        str(tmp_path / "eng"),
        "--speculative_decoding_mode",
        "eagle",
        *args,
    )
    assert r.returncode == 1 and words in r.stderr


def test_trtllm_build_refuses_pipeline_parallel_eagle(machine, wheel, models, tmp_path):  # "No PP"
    # (docs/source/legacy/advanced/speculative-decoding.md)
    ckpt = _checkpoint(
        tmp_path,
        wheel,
        models,
        architecture="EagleForCausalLM",
        num_eagle_layers=4,
        max_draft_len=63,
        mapping={"world_size": 2, "tp_size": 1, "pp_size": 2},
    )
    (ckpt / "rank1.safetensors").write_bytes((ckpt / "rank0.safetensors").read_bytes())
    r = _trtllm_build(
        "--checkpoint_dir",
        str(ckpt),
        "--output_dir",
        str(tmp_path / "eng"),
        "--speculative_decoding_mode",
        "eagle",
        "--max_batch_size",
        "8",
    )
    assert r.returncode == 1 and "EAGLE does not support pipeline parallelism" in r.stderr


def test_trtllm_build_needs_every_rank(machine, wheel, models, tmp_path):  # build.py,
    # docs/source/legacy/architecture/checkpoint.md
    ckpt = _checkpoint(tmp_path, wheel, models, mapping={"world_size": 2, "tp_size": 2, "pp_size": 1})
    r = _trtllm_build("--checkpoint_dir", str(ckpt), "--output_dir", str(tmp_path / "eng"))
    assert r.returncode == 1 and "rank1.safetensors not found" in r.stderr


def test_example_eagle_script_asserts_pp_1(machine, models, tmp_path):  # examples/eagle/convert_checkpoint.py
    from trtllm_helpers import EXAMPLES

    r = subprocess.run(
        [
            sys.executable,
            str(EXAMPLES / "eagle" / "convert_checkpoint.py"),
            "--model_dir",
            str(models / "target"),
            "--eagle_model_dir",
            str(models / "eagle"),
            "--pp_size",
            "2",
            "--tp_size",
            "1",
            "--output_dir",
            str(tmp_path / "o"),
        ],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 1 and "Pipeline parallelism is not supported" in r.stderr
