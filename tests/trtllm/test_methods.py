"""Every method's engine steps through the TensorRT-LLM double: checkpoints, engines, and the values in them.

Expected numbers are computed here from upstream's rules (not from specbuild.plan), e.g. the engine's
max_seq_len is the recipe's plus max_draft_len (plus num_eagle_layers for EAGLE) (tensorrt_llm/builder.py).
"""

from __future__ import annotations

import json

import pytest
from trtllm_helpers import EXAMPLES, leftovers

SEQ, BATCH, INPUT = 256, 4, 128  # the recipe defaults of conftest.write_recipe
MEDUSA, EAGLE, DTM, PLD, LOOKAHEAD, NONE = 4, 32, 2, 2, 8, 1  # SpeculativeDecodingMode values
# (models/modeling_utils.py)


def build_config(compiled, role):
    return compiled.engine_config(role)["build_config"]


def rank_files(folder, suffix):
    return sorted(p.name for p in folder.glob(f"rank*.{suffix}"))


def test_none_builds_one_plain_engine(machine, write_recipe, compile_engines):
    c = compile_engines(write_recipe("none"))
    assert set(c.engines) == {"target"}
    b = build_config(c, "target")
    assert (b["speculative_decoding_mode"], b["max_draft_len"], b["max_seq_len"]) == (NONE, 0, SEQ)
    assert b["max_batch_size"] == BATCH and b["max_input_len"] == INPUT
    # check_max_num_tokens clips the default 8192 to max_batch_size * max_seq_len (builder.py)
    assert b["max_num_tokens"] == BATCH * SEQ
    assert c.checkpoint_config("target")["architecture"] == "LlamaForCausalLM"
    assert rank_files(c.engines["target"], "engine") == ["rank0.engine"]
    assert c.engine_config("target")["version"] == "1.2.0"
    assert not leftovers(machine.root)


def test_medusa_wheel_path_carries_heads_and_draft_len(machine, write_recipe, compile_engines):
    log = machine.root / "calls.jsonl"
    machine.set("SPECBUILD_DOUBLE_CALL_LOG", str(log))
    c = compile_engines(write_recipe("medusa"))
    assert set(c.engines) == {"target", "baseline"}  # validation.require_lossless defaults to true
    ckpt = c.checkpoint_config("target")
    # Heads and draft length are the recipe's (3 and 20), not the wheel defaults (4 and 63) (models/medusa/config.py)
    assert (ckpt["architecture"], ckpt["num_medusa_heads"], ckpt["num_medusa_layers"], ckpt["max_draft_len"]) == (
        "MedusaForCausalLM",
        3,
        1,
        20,
    )
    b = build_config(c, "target")
    assert (b["speculative_decoding_mode"], b["max_draft_len"], b["max_seq_len"]) == (MEDUSA, 20, SEQ + 20)
    base = build_config(c, "baseline")
    assert (base["speculative_decoding_mode"], base["max_draft_len"], base["max_seq_len"]) == (NONE, 0, SEQ)
    assert c.checkpoint_config("baseline")["architecture"] == "LlamaForCausalLM"
    medusa_call = next(json.loads(line) for line in log.read_text().splitlines() if "Medusa" in line)
    args = medusa_call["args"]
    assert args["speculative_model_dir"]["type"] == "PosixPath"  # must be a pathlib.Path (models/medusa/config.py)
    assert args["trust_remote_code"]["value"] is False  # the wheel would default it to True


def test_medusa_script_path_honours_dtype(machine, write_recipe, compile_engines):
    c = compile_engines(write_recipe("medusa", model={"dtype": "bfloat16"}), examples=EXAMPLES)
    ckpt = c.checkpoint_config("target")
    assert (ckpt["dtype"], ckpt["num_medusa_heads"], ckpt["max_draft_len"]) == ("bfloat16", 3, 20)
    assert build_config(c, "target")["max_seq_len"] == SEQ + 20


def test_medusa_bfloat16_without_examples_is_refused(machine, write_recipe, compile_engines):
    from specbuild.errors import UserError

    with pytest.raises(UserError, match="float16 whatever dtype"):
        compile_engines(write_recipe("medusa", model={"dtype": "bfloat16"}))
    assert not (machine.root / "engines").exists()


def test_eagle_wheel_path(machine, write_recipe, compile_engines):
    c = compile_engines(write_recipe("eagle"))
    ckpt = c.checkpoint_config("target")
    assert (ckpt["architecture"], ckpt["num_eagle_layers"], ckpt["max_draft_len"]) == ("EagleForCausalLM", 4, 63)
    assert ckpt["eagle_net_config"]["num_hidden_layers"] == 1
    b = build_config(c, "target")
    # max_seq_len += max_draft_len + num_eagle_layers for EAGLE (builder.py)
    assert (b["speculative_decoding_mode"], b["max_draft_len"], b["max_seq_len"]) == (EAGLE, 63, SEQ + 63 + 4)
    # max_num_tokens: clipped to 4 * 256 = 1024, then raised to max_batch_size * (max_draft_len + 1) = 256 -> 1024
    assert b["max_num_tokens"] == max(BATCH * SEQ, BATCH * 64)
    assert b["plugin_config"]["use_paged_context_fmha"] is True


def test_eagle_three_layers_goes_through_the_example_script(machine, write_recipe, compile_engines):
    three = {
        "method": "eagle",
        "num_eagle_layers": 3,
        "max_draft_len": 30,
        "choices": [[0], [1], [0, 0], [0, 1], [0, 0, 0]],
    }
    c = compile_engines(write_recipe("eagle", speculation=three), examples=EXAMPLES)
    ckpt = c.checkpoint_config("target")
    assert (ckpt["num_eagle_layers"], ckpt["max_draft_len"]) == (3, 30)
    assert build_config(c, "target")["max_seq_len"] == SEQ + 30 + 3


def test_eagle_three_layers_without_examples_is_refused(machine, write_recipe, compile_engines):
    from specbuild.errors import UserError

    three = {
        "method": "eagle",
        "num_eagle_layers": 3,
        "max_draft_len": 30,
        "choices": [[0], [1], [0, 0], [0, 1], [0, 0, 0]],
    }
    with pytest.raises(UserError, match="loads exactly 4"):
        compile_engines(write_recipe("eagle", speculation=three))


def test_draft_target_builds_draft_target_and_baseline(machine, write_recipe, compile_engines):
    c = compile_engines(write_recipe("draft_target"))
    assert set(c.engines) == {"target", "draft", "baseline"}
    t, d = build_config(c, "target"), build_config(c, "draft")
    assert (t["speculative_decoding_mode"], t["max_draft_len"], t["max_seq_len"]) == (DTM, 6, SEQ + 6)
    assert (d["speculative_decoding_mode"], d["max_draft_len"], d["max_seq_len"]) == (NONE, 0, SEQ)
    # use_draft_logits: both engines gather generation logits (examples/draft_target_model/README.md); never context
    # logits with drafts (build.py)
    assert t["gather_generation_logits"] and d["gather_generation_logits"]
    assert not t["gather_context_logits"]
    for role in ("target", "draft"):
        assert build_config(c, role)["plugin_config"]["use_paged_context_fmha"] is True  # KV reuse
        # (examples/draft_target_model/README.md)
    assert (c.layout.checkpoint("draft") / "rank0.safetensors").is_file()


def test_prompt_lookup_uses_draft_tokens_external(machine, write_recipe, compile_engines):
    c = compile_engines(write_recipe("prompt_lookup", validation={"require_lossless": False}))
    assert set(c.engines) == {"target"}  # no baseline without the lossless check or a speedup gate
    b = build_config(c, "target")
    assert (b["speculative_decoding_mode"], b["max_draft_len"], b["max_seq_len"]) == (PLD, 5, SEQ + 5)
    assert not b["gather_generation_logits"]


def test_lookahead_draft_len_follows_the_formula(machine, write_recipe, compile_engines):
    c = compile_engines(write_recipe("lookahead"))
    w, n, g = 4, 4, 4
    expected = (0 if n == 1 else n - 2) + (w - 1 + g) * (n - 1)  # examples/lookahead/README.md
    b = build_config(c, "target")
    assert (b["speculative_decoding_mode"], b["max_draft_len"], b["max_seq_len"]) == (
        LOOKAHEAD,
        expected,
        SEQ + expected,
    )


def test_tensor_parallel_writes_every_rank(machine, write_recipe, compile_engines):
    machine.set("SPECBUILD_DOUBLE_GPUS", "NVIDIA H200,9.0;NVIDIA H200,9.0")
    c = compile_engines(
        write_recipe(
            "prompt_lookup",
            build={"tp_size": 2},
            triton={"gpu_device_ids": [0, 1]},
            validation={"require_lossless": False},
        )
    )
    assert rank_files(c.layout.checkpoint("target"), "safetensors") == ["rank0.safetensors", "rank1.safetensors"]
    assert rank_files(c.engines["target"], "engine") == ["rank0.engine", "rank1.engine"]
    assert c.checkpoint_config("target")["mapping"] == {"world_size": 2, "tp_size": 2, "pp_size": 1}


def test_int8_weight_only_is_recorded_in_the_checkpoint(machine, write_recipe, compile_engines):
    c = compile_engines(write_recipe("none", build={"quantization": "int8_weight_only"}))
    assert c.checkpoint_config("target")["quantization"]["quant_algo"] == "W8A16"


def test_fp8_goes_through_calibrated_quantize(machine, write_recipe, compile_engines):
    log = machine.root / "calls.jsonl"
    machine.set("SPECBUILD_DOUBLE_CALL_LOG", str(log))
    c = compile_engines(write_recipe("none", build={"quantization": "fp8"}))
    assert c.checkpoint_config("target")["quantization"]["quant_algo"] == "FP8"
    calls = [json.loads(line)["call"] for line in log.read_text().splitlines()]
    assert calls == ["LLaMAForCausalLM.quantize"]


def test_fp8_needs_compute_capability_8_9(machine, write_recipe, compile_engines):
    from specbuild.errors import UserError

    machine.set("SPECBUILD_DOUBLE_GPUS", "NVIDIA A100-SXM4-80GB,8.0")
    with pytest.raises(UserError, match="fp8 needs compute capability 8.9"):
        compile_engines(write_recipe("none", build={"quantization": "fp8"}))


def test_rebuild_replaces_the_previous_engine(machine, write_recipe, compile_engines):
    path = write_recipe("prompt_lookup", validation={"require_lossless": False})
    first = compile_engines(path)
    marker = first.engines["target"] / "stale-file"
    marker.write_text("from the previous build")
    second = compile_engines(path)
    assert not marker.exists()
    assert (second.engines["target"] / "rank0.engine").is_file()
    assert not leftovers(machine.root)


def test_progress_reports_each_step(machine, write_recipe, compile_engines):
    c = compile_engines(write_recipe("prompt_lookup", validation={"require_lossless": False}))
    text = "\n".join(c.progress)
    assert "TensorRT-LLM 1.2.0" in text and "NVIDIA H200" in text
    assert "target: convert target checkpoint" in text and "target: trtllm-build the target engine" in text
    assert "engine verified" in text


def test_eagle_with_a_continuous_kv_cache_is_refused_at_load(machine, write_recipe):
    # EagleForCausalLM.forward asserts a paged KV cache (TensorRT-LLM source); refused before any conversion.
    from specbuild.errors import RecipeError
    from specbuild.recipe import load_recipe

    with pytest.raises(RecipeError, match="build.kv_cache_type: EAGLE engines need the paged KV cache"):
        load_recipe(write_recipe("eagle", build={"kv_cache_type": "continuous"}))
