"""model.yaml read the way TensorRT-LLM's LLM reads it, for the CPU rehearsal (specbuild.reference.llmapi_yaml):
every model.yaml specbuild writes is understood, unknown keys fail naming them, triton_config is checked as
NVIDIA's model needs it, and speculative_config maps onto the reference methods (llmapi model.py@b35ac1b,
tensorrt_llm/llmapi/llm_args.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from specbuild.repository.llmapi import model_yaml
from specbuild.repository.llmapi.flavour import llmapi_refusal
from specbuild.recipe.llm_api import RELEASES
from specbuild.methods import describe
from specbuild.recipe import load_recipe
from specbuild.reference.llmapi_yaml import ModelYamlError, model_yaml_path, read_model_yaml

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "checkpoints" / "tiny"
LLMAPI_RECIPES = sorted((ROOT / "recipes").glob("*/llmapi_*.yaml"))
needs_tiny = pytest.mark.skipif(not (TINY / "target" / "config.json").exists(), reason="checkpoints/tiny not built")


def write(folder: Path, data: dict) -> Path:
    path = folder / "model.yaml"
    path.write_text(model_yaml.dump(data))
    return path


def written(recipe_path: Path, release: str | None = None, role: str = "target") -> dict:
    recipe = load_recipe(recipe_path)
    if release is not None:
        recipe = recipe.model_copy(update={"llm_api": recipe.llm_api.model_copy(update={"release": release})})
    return model_yaml.model_yaml(recipe, describe(recipe), role=role)


def base(**changes) -> dict:
    data = {
        "model": str(TINY / "target"),
        "max_batch_size": 4,
        "max_seq_len": 256,
        "max_input_len": 128,
        "triton_config": {"max_batch_size": 0, "decoupled": True},
    }
    data.update(changes)
    return data


@needs_tiny
@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize("path", LLMAPI_RECIPES, ids=[f"{p.parent.name}/{p.stem}" for p in LLMAPI_RECIPES])
def test_every_model_yaml_specbuild_writes_is_understood(path, release, tmp_path):
    recipe = load_recipe(path)
    recipe = recipe.model_copy(update={"llm_api": recipe.llm_api.model_copy(update={"release": release})})
    refused = llmapi_refusal(recipe, describe(recipe)) is not None  # check refuses the method at this release
    for role in ("baseline",) if refused else ("target", "baseline"):
        data = written(path, release, role)
        data["tensor_parallel_size"] = 1  # the tp recipe is for GPUs; the reference refuses tp > 1 (below)
        s = read_model_yaml(write(tmp_path, data))
        spec = data.get("speculative_config")
        if spec is None:
            assert (s.method, s.max_draft_len, s.decoding) == ("none", 0, {})
            continue
        described = describe(load_recipe(path))
        assert s.max_draft_len == described.max_draft_len and s.decoding_type == spec["decoding_type"]
        # MTP before 1.3 gives its draft length as num_nextn_predict_layers (MTPDecodingConfig, llm_args.py@v1.2.0)
        drafts = spec.get("max_draft_len", spec.get("num_nextn_predict_layers"))
        assert drafts is None or s.max_draft_len == drafts  # (AUTO names none: its heuristic picks it)
        method = described.method
        if method == "auto":  # TensorRT-LLM serves the NGram config its heuristic picks, and so does the rehearsal
            assert s.method == "prompt_lookup" and s.notes[-2].startswith("AUTO runs {decoding_type: NGram")
            choice = described.params.choice
            assert s.decoding["max_matching_ngram_size"] == choice.max_matching_ngram_size
            assert s.decoding["draft_len_schedule"] == f"1:{choice.max_draft_len},33:0"  # off above 32 in flight
            continue
        assert s.method == method
        if method == "suffix_automaton":
            assert s.decoding == {
                "max_draft_len": spec["max_draft_len"],
                "max_matching_ngram_size": spec["max_matching_ngram_size"],
                "enable_global_pool": spec["enable_global_pool"],
                **({"global_pool_size": spec["global_pool_size"]} if "global_pool_size" in spec else {}),
            }
        if method == "pard":  # the mask token from the draft's config.json (pard_token)
            assert s.draft_dir == Path(spec["speculative_model"]).resolve()
            assert s.decoding == {"max_draft_len": spec["max_draft_len"], "mask_token_id": 4096}
        if method == "draft_target":
            assert s.draft_dir == Path(spec.get("speculative_model") or spec["speculative_model_dir"]).resolve()
            assert s.decoding == {"num_draft_tokens": spec["max_draft_len"]}
        if method == "prompt_lookup":
            assert s.decoding == {
                "max_draft_len": spec["max_draft_len"],
                "max_matching_ngram_size": spec["max_matching_ngram_size"],
            }
        assert (s.max_batch_size, s.max_seq_len, s.max_input_len) == (
            data["max_batch_size"],
            data["max_seq_len"],
            data["max_input_len"],
        )
        assert s.decoupled == data["triton_config"]["decoupled"]
        assert s.cancellation_check_period_ms == data["triton_config"]["cancellation_check_period_ms"]


@needs_tiny
@pytest.mark.parametrize(
    "where, key",
    [
        ((), "max_batch_sizes"),
        (("kv_cache_config",), "free_gpu_mem_fraction"),
        (("cuda_graph_config",), "padding_enabled"),
    ],
)
def test_an_unknown_key_fails_naming_it(where, key, tmp_path):
    data = base(kv_cache_config={"enable_block_reuse": True}, cuda_graph_config={"max_batch_size": 4})
    target = data
    for part in where:
        target = target[part]
    target[key] = 1
    with pytest.raises(ModelYamlError, match=rf"unknown key {'.'.join((*where, key))} .*extra='forbid'"):
        read_model_yaml(write(tmp_path, data))


@needs_tiny
def test_block_reuse_turns_the_reference_kv_reuse_on_and_off(tmp_path):
    assert read_model_yaml(write(tmp_path, base())).enable_kv_cache_reuse  # the LLM API's default
    off = read_model_yaml(write(tmp_path, base(kv_cache_config={"enable_block_reuse": False})))
    assert not off.enable_kv_cache_reuse
    assert any("enable_block_reuse turns the reference's KV reuse" in n for n in off.notes)


@needs_tiny
def test_an_unknown_key_in_speculative_config_fails_naming_it(tmp_path):
    spec = {"decoding_type": "NGram", "max_draft_len": 3, "max_matching_ngram_size": 2, "speculative_model": "x"}
    with pytest.raises(ModelYamlError, match=r"unknown key speculative_config\.speculative_model"):
        read_model_yaml(write(tmp_path, base(speculative_config=spec)))


@needs_tiny
def test_a_known_llm_option_the_reference_cannot_honour_says_so(tmp_path):
    with pytest.raises(ModelYamlError, match=r"enable_chunked_prefill is a TensorRT-LLM option the reference"):
        read_model_yaml(write(tmp_path, base(enable_chunked_prefill=True)))


@needs_tiny
@pytest.mark.parametrize(
    "triton_config, message",
    [
        ({"max_batch_size": 8, "decoupled": True}, r"triton_config.max_batch_size is 8, .* set 0"),
        ({"max_batch_size": 0}, r"triton_config.decoupled is missing"),
        ({"decoupled": False}, r"triton_config.max_batch_size is missing"),
        ({"max_batch_size": 0, "decoupled": "yes please"}, r"triton_config.decoupled='yes please'"),
        (
            {"max_batch_size": 0, "decoupled": True, "cancellation_check_period_ms": 0},
            r"cancellation_check_period_ms=0",
        ),
    ],
)
def test_triton_config_is_checked_as_nvidias_model_needs_it(triton_config, message, tmp_path):
    with pytest.raises(ModelYamlError, match=message):
        read_model_yaml(write(tmp_path, base(triton_config=triton_config)))


@needs_tiny
def test_defaults_and_cancellation_period(tmp_path):
    data = base()
    del data["max_seq_len"]
    s = read_model_yaml(write(tmp_path, data))
    assert s.max_seq_len == 2048  # the LLM derives it from the model (max_position_embeddings)
    assert s.max_num_tokens == 8192 and s.cancellation_check_period_ms == 100  # LLM / NVIDIA model defaults


@needs_tiny
@pytest.mark.parametrize(
    "decoding_type, method",
    [
        ("Draft_Target", "draft_target"),
        ("DraftTarget", "draft_target"),
        ("Eagle3", "eagle3"),
        ("Eagle", "eagle3"),
        ("NGram", "prompt_lookup"),
        ("SA", "suffix_automaton"),
        ("PARD", "pard"),
    ],
)
def test_decoding_types_of_every_release_map_to_the_reference_methods(decoding_type, method, tmp_path):
    spec = {"decoding_type": decoding_type, "max_draft_len": 3}
    if method in ("draft_target", "eagle3"):
        spec["speculative_model_dir"] = str(TINY / "draft")
    if method == "pard":
        spec["speculative_model"] = str(TINY / "pard")
    s = read_model_yaml(write(tmp_path, base(speculative_config=spec)))
    assert (s.method, s.max_draft_len) == (method, 3)
    if method == "eagle3":
        assert s.weights == {"eagle3": (TINY / "draft").resolve()} and s.decoding == {"max_draft_len": 3}


@needs_tiny
@pytest.mark.parametrize("max_batch_size, k, n", [(4, 5, 3), (5, 3, 5), (64, 3, 5)])
def test_auto_serves_the_ngram_config_of_tensorrt_llms_heuristic(max_batch_size, k, n, tmp_path):
    """auto_heuristic.py@f00d21a suggest_spec_config(max_batch_size), which py_executor_creator.py@bab0f2e serves
    in place of the AUTO config (its own fields dropped): NGram, speculation off above 32 requests in flight."""
    spec = {"decoding_type": "AUTO", "acceptance_rate_threshold": 0.5, "acceptance_rate_window_size": 4}
    s = read_model_yaml(write(tmp_path, base(max_batch_size=max_batch_size, speculative_config=spec)))
    assert (s.method, s.max_draft_len, s.decoding_type) == ("prompt_lookup", k, "AUTO")
    assert s.decoding == {"max_draft_len": k, "max_matching_ngram_size": n, "draft_len_schedule": f"1:{k},33:0"}
    assert any(note.startswith(f"AUTO runs {{decoding_type: NGram, max_draft_len: {k},") for note in s.notes)


@needs_tiny
def test_ngram_pool_flags_that_the_reference_does_not_follow_are_noted(tmp_path):
    spec = {"decoding_type": "NGram", "max_draft_len": 3, "max_matching_ngram_size": 2}
    default = read_model_yaml(write(tmp_path, base(speculative_config=spec)))
    assert any("oldest match first" in n for n in default.notes)
    assert not any("not followed" in n for n in default.notes)
    newest = read_model_yaml(write(tmp_path, base(speculative_config={**spec, "is_use_oldest": False})))
    assert any(n.startswith("is_use_oldest: false is not followed") for n in newest.notes)


@needs_tiny
@pytest.mark.parametrize(
    "spec, message",
    [
        (
            {"decoding_type": "MTP", "max_draft_len": 2, "use_dynamic_tree": True},
            r"MTP.s dynamic tree is not rehearsed",
        ),
        ({"decoding_type": "Medusa", "max_draft_len": 3}, r"has no Medusa"),
        ({"decoding_type": "PARD", "max_draft_len": 3}, r"speculative_model is required for PARD"),
        (
            {"decoding_type": "DFlash", "max_draft_len": 3},
            r"decoding_type='DFlash' is not one the reference runtime serves",
        ),
        (
            {"decoding_type": "SA", "max_draft_len": 3, "max_matching_ngram_size": 0},
            r"max_matching_ngram_size must be > 0 \(fixed ngram\) or -1",
        ),
        ({"decoding_type": "NGram", "max_draft_len": 0}, r"max_draft_len must be > 0 for NGram"),
        ({"decoding_type": "NGram", "max_draft_len": 3, "max_matching_ngram_size": 0}, r"max_matching_ngram_size is 0"),
        ({"decoding_type": "Draft_Target", "max_draft_len": 3}, r"speculative_model is required for DraftTarget"),
        ({"decoding_type": "Eagle3", "max_draft_len": 3}, r"Draft model must be provided for EAGLE"),
        (
            {"decoding_type": "Draft_Target", "max_draft_len": 3, "speculative_model": "org/not-a-folder"},
            r"not a local folder",
        ),
        (
            {"decoding_type": "NGram", "max_draft_len": 3, "draft_len_schedule": {2: 3}},
            r"draft_len_schedule: has no entry for batch size 1",
        ),
        (
            {"decoding_type": "NGram", "max_draft_len": 3, "draft_len_schedule": {1: 2, 4: 0}},
            r"draft_len_schedule\[1\]: batch size 1 maps to 2 but the full draft length is 3",
        ),
        (
            {"decoding_type": "NGram", "max_draft_len": 3, "draft_len_schedule": {1: 3, 4: 5}},
            r"draft_len_schedule\[4\]: draft length 5 exceeds",
        ),
    ],
)
def test_speculative_configs_the_reference_cannot_serve_fail_with_the_reason(spec, message, tmp_path):
    with pytest.raises(ModelYamlError, match=message):
        read_model_yaml(write(tmp_path, base(speculative_config=spec)))


@needs_tiny
@pytest.mark.parametrize(
    "changes, message",
    [
        ({"tensor_parallel_size": 2}, r"tensor_parallel_size is 2"),
        ({"max_beam_width": 2}, r"max_beam_width is 2"),
        ({"model": "meta-llama/Llama-3.1-8B"}, r"not a local folder"),
    ],
)
def test_what_the_reference_runtime_cannot_do_is_refused(changes, message, tmp_path):
    with pytest.raises(ModelYamlError, match=message):
        read_model_yaml(write(tmp_path, base(**changes)))


def test_the_file_follows_llm_config_path(tmp_path, monkeypatch):
    monkeypatch.delenv("LLM_CONFIG_PATH", raising=False)
    assert model_yaml_path(tmp_path) == tmp_path / "model.yaml"
    monkeypatch.setenv("LLM_CONFIG_PATH", "other.yaml")
    assert model_yaml_path(tmp_path) == tmp_path / "other.yaml"
    monkeypatch.setenv("LLM_CONFIG_PATH", "/etc/abs.yaml")  # os.path.join: an absolute path wins
    assert model_yaml_path(tmp_path) == Path("/etc/abs.yaml")
    with pytest.raises(ModelYamlError, match=r"'abs.yaml' containing TRT-LLM engine args not found"):
        read_model_yaml(model_yaml_path(tmp_path))


@needs_tiny
@pytest.mark.parametrize(
    "fields, schedule",
    [
        ({"draft_len_schedule": {4: 1, 1: 3, 8: 0}}, "1:3,4:1,8:0"),  # TensorRT-LLM 1.2's meaning: from key on
        ({"max_concurrency": 2}, "1:3,3:0"),  # 1.0 / 1.1: speculation off above 2 requests
        ({"draft_len_schedule": {1: 3, 2: 2, 8: 1}, "max_concurrency": 4}, "1:3,2:2,5:0"),
        ({"max_concurrency": 0}, "1:0"),
    ],
)
def test_the_draft_length_per_batch_size_reaches_the_executor(fields, schedule, tmp_path):
    spec = {"decoding_type": "NGram", "max_draft_len": 3, "max_matching_ngram_size": 2, **fields}
    s = read_model_yaml(write(tmp_path, base(speculative_config=spec)))
    assert s.decoding["draft_len_schedule"] == schedule


SHORT = ROOT / "tests" / "recipes" / "ckpt" / "short"  # a Llama config with max_position_embeddings 256
DRAFT = {"decoding_type": "Draft_Target", "speculative_model": str(TINY / "draft")}


@needs_tiny
@pytest.mark.parametrize(
    "changes, message",
    [
        ({"max_seq_len": 10**12}, r"max_seq_len=1000000000000: Input should be less than or equal to 2147483647"),
        (
            {"max_seq_len": 4096, "max_input_len": 3000},
            r"max_seq_len is 4096 but the model's max_position_embeddings is 2048: .* lower max_seq_len to at most 2048",
        ),
        ({"max_batch_size": 10**12}, r"max_batch_size=1000000000000: Input should be less than or equal to 2147483647"),
        ({"max_num_tokens": 2**31}, r"max_num_tokens=2147483648: Input should be less than or equal to 2147483647"),
        ({"stream_interval": 2**31}, r"stream_interval=2147483648"),
        (
            {"speculative_config": {**DRAFT, "max_draft_len": 10**9}},
            r"speculative_config.max_draft_len is 1000000000 but max_seq_len is 256: a step can use at most 255",
        ),
        (
            {"speculative_config": {**DRAFT, "max_draft_len": 2**31}},
            r"speculative_config.max_draft_len=2147483648: Input should be less than or equal to 2147483647",
        ),
        (
            {"speculative_config": {"decoding_type": "NGram", "max_draft_len": 3, "max_matching_ngram_size": 2**40}},
            r"speculative_config.max_matching_ngram_size=1099511627776",
        ),
        (
            {"speculative_config": {**DRAFT, "max_draft_len": 3, "speculative_model": str(SHORT)}, "max_seq_len": 1024},
            r"max_seq_len is 1024 but the speculative_model's \(.*short/config.json\) max_position_embeddings is 256",
        ),
        (
            {"triton_config": {"max_batch_size": 0, "decoupled": True, "cancellation_check_period_ms": 10**30}},
            r"cancellation_check_period_ms=1000000000000000000000000000000 — give a number of milliseconds from 1 to 60000",
        ),
        (
            {"triton_config": {"max_batch_size": 0, "decoupled": True, "cancellation_check_period_ms": 60001}},
            r"cancellation_check_period_ms=60001",
        ),
    ],
)
def test_absurd_limits_are_refused_naming_the_key(changes, message, tmp_path):
    """Every size fits an int32 (TensorRT-LLM's SizeType32), the sequence fits the positions of the model and of
    its draft, a chain of drafts fits the sequence, the cancellation period is one a request outlives
    (specbuild/facts/bounds.py): the served model never runs past its positions."""
    with pytest.raises(ModelYamlError, match=message):
        read_model_yaml(write(tmp_path, base(**changes)))


@needs_tiny
def test_the_largest_sizes_that_fit_are_served(tmp_path):
    data = base(
        max_seq_len=2048,
        max_input_len=2000,
        max_batch_size=2**31 - 1,
        max_num_tokens=2**31 - 1,
        speculative_config={**DRAFT, "max_draft_len": 2047},
        triton_config={"max_batch_size": 0, "decoupled": True, "cancellation_check_period_ms": 60000},
    )
    s = read_model_yaml(write(tmp_path, data))
    assert (s.max_seq_len, s.max_draft_len, s.cancellation_check_period_ms) == (2048, 2047, 60000)
