"""check, plan and compile --no-validate (TensorRT-LLM through the doubles in tests/doubles) on shape-real copies
of public checkpoints (builder.py), every target/head pair in the flavour that has its method, the other flavour's
refusal asserted. Expected values are the real models' facts, written here: vicuna-7b's 2048 positions,
FasterDecoding's Medusa file of 5 heads, the EAGLE-3 head's 3 captured layers {1, 15, 28} of 32, DeepSeek-R1's one
MTP layer, and trtllm-build's max_seq_len rule (+ max_draft_len, + num_eagle_layers for EAGLE;
tensorrt_llm/builder.py)."""

from __future__ import annotations

import json

import pytest
import yaml

from real_checkpoints.builder import copy_checkpoint
from specbuild.cli import main
from specbuild.errors import RecipeError
from specbuild.recipe import load_recipe

VICUNA_POSITIONS = 2048  # lmsys/vicuna-7b-v1.3 max_position_embeddings
MEDUSA_TREE, EAGLE_TREE = 63, 63  # mc_sim_7b_63 nodes (examples/medusa, examples/eagle READMEs)
EAGLE_LAYERS = 4
LLAMA31_LAYERS = 32
EAGLE3_CAPTURED = (1, 15, 28)  # SafeAILab/EAGLE modeling_llama_kv.py for 32 layers = {1, L//2-1, L-4}


def problems(path) -> str:
    with pytest.raises(RecipeError) as caught:
        load_recipe(path)
    return str(caught.value)


def run(args: list[str], capsys) -> tuple[int, str, str]:
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


def plan_json(path, capsys) -> dict:
    code, out, err = run(["plan", str(path), "--json"], capsys)
    assert code == 0, err
    return json.loads(out)


def compile_no_validate(path, tmp_path, capsys) -> str:
    code, _, err = run(
        [
            "compile",
            str(path),
            "--no-validate",
            "--engines-dir",
            str(tmp_path / "engines"),
            "--repo-dir",
            str(tmp_path / "triton_repo"),
        ],
        capsys,
    )
    assert code == 0, err
    assert "Traceback" not in err
    return err


def step(plan: dict, kind: str, role: str = "target") -> dict:
    return next(s for s in plan["steps"] if s["kind"] == kind and s["role"] == role)


def engine_config(tmp_path, name: str, role: str = "target") -> dict:
    return json.loads((tmp_path / "engines" / name / role / "config.json").read_text())


# --- engine flavour: Medusa and EAGLE-1 on vicuna-7b, draft-target on Llama-3.1-8B ------------------------------


def medusa(real, num_heads: int = 4):
    return {"method": "medusa", "checkpoint": str(real.medusa), "num_heads": num_heads}


def test_vicuna_medusa_as_tensorrt_llm_converts_it(gpu, real, recipe_file, capsys, tmp_path):
    """TensorRT-LLM's examples/medusa README: --num_medusa_heads 4 over FasterDecoding's heads (config.json says
    2, the file holds 5) with the 4-deep mc_sim_7b_63 tree; the engine's max_seq_len is the recipe's + 63."""
    seq = VICUNA_POSITIONS - MEDUSA_TREE
    path = recipe_file(
        "vicuna-medusa",
        model={"checkpoint": str(real.vicuna)},
        speculation=medusa(real),
        build={"max_batch_size": 4, "max_input_len": 1024, "max_seq_len": seq},
    )
    code, out, err = run(["check", str(path)], capsys)
    assert code == 0, err
    plan = plan_json(path, capsys)
    convert = step(plan, "convert")["details"]
    assert convert["arguments"]["speculative_config"] == {"num_medusa_heads": 4}
    assert step(plan, "verify-engine")["details"]["expect"]["max_seq_len"] == VICUNA_POSITIONS
    compile_no_validate(path, tmp_path, capsys)
    built = engine_config(tmp_path, "vicuna-medusa")
    assert built["pretrained_config"]["num_medusa_heads"] == 4
    assert (built["build_config"]["max_seq_len"], built["build_config"]["max_draft_len"]) == (VICUNA_POSITIONS, 63)
    rank = tmp_path / "engines" / "vicuna-medusa" / "checkpoints" / "target" / "rank0.safetensors"
    assert rank.stat().st_size > 13_000_000_000  # 7B in float16: written with its real shapes ...
    assert rank.stat().st_blocks * 512 < 50_000_000  # ... and sparse


def test_medusa_heads_beyond_the_file_are_refused_naming_it(gpu, real, recipe_file):
    path = recipe_file(
        "vicuna-medusa6",
        model={"checkpoint": str(real.vicuna)},
        speculation=medusa(real, 6),
        build={"max_seq_len": 1024},
    )
    text = problems(path)
    assert "speculation.num_heads: is 6 but" in text and "medusa_lm_head.pt holds 5 Medusa head(s)" in text


def test_medusa_heads_the_file_holds_pass_with_a_config_that_says_fewer(gpu, real, recipe_file, capsys):
    path = recipe_file(
        "vicuna-medusa5",
        model={"checkpoint": str(real.vicuna)},
        speculation=medusa(real, 5),
        build={"max_seq_len": 1024},
    )
    assert run(["check", str(path)], capsys)[0] == 0


@pytest.mark.parametrize("method, extra", [("medusa", MEDUSA_TREE), ("eagle", EAGLE_TREE + EAGLE_LAYERS)])
def test_the_engine_context_counts_the_draft_tokens(gpu, real, recipe_file, method, extra):
    """vicuna's 2048 positions: engines of 2048 + 63 (Medusa) and 2048 + 67 (EAGLE) would pass them."""
    spec = medusa(real) if method == "medusa" else {"method": "eagle", "checkpoint": str(real.eagle1)}
    path = recipe_file(
        f"vicuna-{method}-ctx",
        model={"checkpoint": str(real.vicuna)},
        speculation=spec,
        build={"max_input_len": 1024, "max_seq_len": VICUNA_POSITIONS},
    )
    text = problems(path)
    assert f"max_seq_len {VICUNA_POSITIONS + extra}, as trtllm-build builds it" in text
    assert f"at most {VICUNA_POSITIONS - extra}" in text


def test_vicuna_eagle1(gpu, real, recipe_file, capsys, tmp_path):
    """TensorRT-LLM's examples/eagle README: 4 EAGLE layers, 10 non-leaves, 63 draft tokens, mc_sim_7b_63."""
    seq = VICUNA_POSITIONS - EAGLE_TREE - EAGLE_LAYERS
    path = recipe_file(
        "vicuna-eagle",
        model={"checkpoint": str(real.vicuna)},
        speculation={"method": "eagle", "checkpoint": str(real.eagle1)},
        build={"max_batch_size": 4, "max_input_len": 1024, "max_seq_len": seq},
    )
    assert run(["check", str(path)], capsys)[0] == 0
    plan = plan_json(path, capsys)
    assert step(plan, "verify-engine")["details"]["expect"]["max_seq_len"] == VICUNA_POSITIONS
    compile_no_validate(path, tmp_path, capsys)
    built = engine_config(tmp_path, "vicuna-eagle")["pretrained_config"]
    assert (built["num_eagle_layers"], built["max_draft_len"]) == (EAGLE_LAYERS, EAGLE_TREE)
    assert built["eagle_net_config"]["num_hidden_layers"] == 1  # the published head: one decoder layer
    assert built["eagle_net_config"]["max_position_embeddings"] == VICUNA_POSITIONS


def test_llama31_draft_target_engine(gpu, real, recipe_file, capsys, tmp_path):
    path = recipe_file(
        "llama-dt",
        model={"checkpoint": str(real.llama31_8b), "dtype": "bfloat16"},
        speculation={"method": "draft_target", "checkpoint": str(real.llama32_1b), "num_draft_tokens": 4},
        build={"max_batch_size": 4, "max_input_len": 4096, "max_seq_len": 8192},
    )
    assert run(["check", str(path)], capsys)[0] == 0
    plan = plan_json(path, capsys)
    assert step(plan, "verify-engine")["details"]["expect"]["max_seq_len"] == 8192 + 4
    assert step(plan, "verify-engine", "draft")["details"]["expect"]["max_seq_len"] == 8192
    compile_no_validate(path, tmp_path, capsys)
    draft = engine_config(tmp_path, "llama-dt", "draft")["pretrained_config"]
    assert (draft["num_hidden_layers"], draft["hidden_size"], draft["head_size"]) == (16, 2048, 64)
    target = engine_config(tmp_path, "llama-dt")["pretrained_config"]
    assert target["rotary_scaling"]["rope_type"] == "llama3" and target["num_key_value_heads"] == 8


@pytest.mark.parametrize("method", ["eagle3", "mtp"])
def test_the_engine_flavour_refuses_llm_api_methods(gpu, real, recipe_file, method):
    spec = {"method": "eagle3", "checkpoint": str(real.eagle3)} if method == "eagle3" else {"method": "mtp"}
    target = real.llama31_8b if method == "eagle3" else real.deepseek_r1
    text = problems(recipe_file(f"engine-{method}", model={"checkpoint": str(target)}, speculation=spec))
    assert f"{method} exists only in the llm-api flavour" in text


# --- llm-api flavour: EAGLE-3 and draft-target on Llama-3.1-8B, MTP on DeepSeek-R1 --------------------------------


def llmapi(**sections):
    return {"flavour": "llm-api", "triton": {"streaming": True}, **sections}


def model_yaml(tmp_path, name: str) -> dict:
    return yaml.safe_load((tmp_path / "triton_repo" / name / "tensorrt_llm" / "1" / "model.yaml").read_text())


def test_llama31_eagle3_llm_api(gpu, real, recipe_file, capsys, tmp_path):
    """The published head fuses 3 target layers (fc [4096, 12288]); TensorRT-LLM's default capture set for 32
    layers is {1, 15, 28}, the layers the head was trained on."""
    from specbuild.methods.eagle3 import default_layers_to_capture

    assert default_layers_to_capture(LLAMA31_LAYERS) == EAGLE3_CAPTURED
    path = recipe_file(
        "llama-eagle3",
        **llmapi(
            model={"checkpoint": str(real.llama31_8b), "dtype": "bfloat16"},
            speculation={"method": "eagle3", "checkpoint": str(real.eagle3), "max_draft_len": 3},
        ),
    )
    assert run(["check", str(path)], capsys)[0] == 0
    plan = plan_json(path, capsys)
    assert plan["flavour"] == "llm-api" and plan["outputs"]["engines"] == {}
    compile_no_validate(path, tmp_path, capsys)
    spec = model_yaml(tmp_path, "llama-eagle3")["speculative_config"]
    assert spec["max_draft_len"] == 3
    assert str(real.eagle3) in (spec.get("speculative_model") or spec.get("speculative_model_dir"))
    two = recipe_file(
        "llama-eagle3-2",
        **llmapi(
            model={"checkpoint": str(real.llama31_8b)},
            speculation={"method": "eagle3", "checkpoint": str(real.eagle3), "layers_to_capture": [1, 15]},
        ),
    )
    assert "the head fuses 3 target layer(s) (fc.weight [4096, 12288])" in problems(two)


def test_llama31_draft_target_llm_api(gpu, real, recipe_file, capsys, tmp_path):
    path = recipe_file(
        "llama-dt-llmapi",
        **llmapi(
            model={"checkpoint": str(real.llama31_8b), "dtype": "bfloat16"},
            speculation={"method": "draft_target", "checkpoint": str(real.llama32_1b)},
        ),
    )
    assert run(["check", str(path)], capsys)[0] == 0
    compile_no_validate(path, tmp_path, capsys)
    spec = model_yaml(tmp_path, "llama-dt-llmapi")["speculative_config"]
    assert spec["max_draft_len"] == 4
    assert str(real.llama32_1b) in (spec.get("speculative_model") or spec.get("speculative_model_dir"))


@pytest.mark.parametrize("release", ["1.0", "1.1", "1.2", "1.3"])
def test_deepseek_r1_mtp_three_deep(gpu, real, recipe_file, capsys, tmp_path, release):
    """TensorRT-LLM's curated deepseek-r1-latency.yaml runs num_nextn_predict_layers 3 on R1's one MTP layer
    (MTP-Eagle reuses it; MTPDecodingConfig in llm_args.py of each release read)."""
    path = recipe_file(
        f"r1-mtp-{release}",
        **llmapi(
            model={"checkpoint": str(real.deepseek_r1), "dtype": "bfloat16", "trust_remote_code": True},
            speculation={"method": "mtp", "num_nextn_predict_layers": 3},
            llm_api={"release": release},
        ),
    )
    assert run(["check", str(path)], capsys)[0] == 0, capsys.readouterr()
    if release == "1.2":
        gpu_version = "1.2.0"
        import os

        os.environ["SPECBUILD_DOUBLE_TRTLLM_VERSION"] = gpu_version
        try:
            compile_no_validate(path, tmp_path, capsys)
        finally:
            del os.environ["SPECBUILD_DOUBLE_TRTLLM_VERSION"]
        spec = model_yaml(tmp_path, f"r1-mtp-{release}")["speculative_config"]
        assert spec["num_nextn_predict_layers"] == 3


def test_mtp_deeper_than_a_multi_layer_checkpoint_is_refused(gpu, real, recipe_file, tmp_path):
    """Vanilla MTP (a checkpoint with more than one MTP layer) drafts one token per layer."""
    two = copy_checkpoint(real.deepseek_r1, tmp_path / "r1-two-mtp-layers", skip=("config.json",))
    cfg = json.loads((real.deepseek_r1 / "config.json").read_text())
    (two / "config.json").write_text(json.dumps({**cfg, "num_nextn_predict_layers": 2}))
    path = recipe_file(
        "r1-mtp-vanilla",
        **llmapi(model={"checkpoint": str(two)}, speculation={"method": "mtp", "num_nextn_predict_layers": 3}),
    )
    text = problems(path)
    assert "speculation.num_nextn_predict_layers: is 3 but the checkpoint has 2 MTP layer(s)" in text
    assert "at most 2" in text


@pytest.mark.parametrize("method", ["medusa", "eagle"])
def test_the_llm_api_flavour_refuses_engine_methods(gpu, real, recipe_file, method):
    spec = medusa(real) if method == "medusa" else {"method": "eagle", "checkpoint": str(real.eagle1)}
    text = problems(recipe_file(f"llmapi-{method}", **llmapi(model={"checkpoint": str(real.vicuna)}, speculation=spec)))
    assert f"{method} is not in TensorRT-LLM's LLM API" in text


# --- SentencePiece tokenizers ---------------------------------------------------------------------------------


def test_a_sentencepiece_draft_of_another_vocabulary_is_refused(gpu, real, recipe_file, tmp_path):
    from real_checkpoints.tokenizers_standin import llama2_sentencepiece_proto

    other = copy_checkpoint(real.vicuna, tmp_path / "vicuna-other-tokenizer", skip=("tokenizer.model",))
    proto = bytearray(llama2_sentencepiece_proto())
    proto[proto.index("\u2581filler100".encode()) + 3] = ord("F")  # one piece spelled differently
    (other / "tokenizer.model").write_bytes(bytes(proto))
    path = recipe_file(
        "vicuna-dt",
        model={"checkpoint": str(real.vicuna)},
        speculation={"method": "draft_target", "checkpoint": str(other)},
        build={"max_seq_len": 1024},
    )
    assert "the draft's tokenizer in" in problems(path)


def test_check_says_what_it_skipped_without_sentencepiece(gpu, real, recipe_file, capsys, monkeypatch):
    from specbuild.checkpoints import checkpoint_files as common

    common._load_sentencepiece.cache_clear()
    monkeypatch.setitem(__import__("sys").modules, "sentencepiece", None)  # import sentencepiece -> ImportError
    path = recipe_file("vicuna-plain", model={"checkpoint": str(real.vicuna)}, build={"max_seq_len": 1024})
    code, out, err = run(["check", str(path)], capsys)
    common._load_sentencepiece.cache_clear()
    assert code == 0, err
    assert (
        "note:" in out
        and "tokenizer.model (SentencePiece) not loaded: the sentencepiece library is not installed" in out
    )


def test_a_truncated_sentencepiece_model_is_refused(gpu, real, recipe_file, tmp_path):
    broken = copy_checkpoint(real.vicuna, tmp_path / "vicuna-broken-tokenizer", skip=("tokenizer.model",))
    (broken / "tokenizer.model").write_bytes((real.vicuna / "tokenizer.model").read_bytes()[:1000])
    path = recipe_file("vicuna-broken", model={"checkpoint": str(broken)}, build={"max_seq_len": 1024})
    assert "tokenizer.model does not load with sentencepiece" in problems(path)
