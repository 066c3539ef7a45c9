"""Emitted config.pbtxt files: protobuf round trip, no placeholders, every must-have value, per-method values."""

from __future__ import annotations

import pytest
from repo_helpers import (
    GPU_LLMAPI_RECIPES,
    GPU_RECIPES,
    REFERENCE_LLMAPI_RECIPES,
    REFERENCE_RECIPES,
    recipe_from,
    write_engine_configs,
    write_llmapi_repository,
)

from specbuild.facts.trees import format_choices
from specbuild.repository.engine import configs, tensors
from specbuild.repository.engine.writer import write_repository
from specbuild.runtimes import runtime_for
from specbuild.methods import describe

ALL_RECIPES = GPU_RECIPES + REFERENCE_RECIPES


def _roles(recipe):
    return ["target"] + (["baseline"] if recipe.builds_baseline else [])


@pytest.mark.parametrize("path", ALL_RECIPES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_config_parses_back_and_equals_what_was_built(path, layout_for):
    recipe = recipe_from(path)
    layout = layout_for(recipe)
    for role in _roles(recipe):
        write_engine_configs(recipe, layout, role)
        repo = write_repository(recipe, describe(recipe), layout, role, flavour=runtime_for(recipe))
        engines = {
            name: layout.engine("draft" if name == "tensorrt_llm_draft" else role) for name in configs.CORE_MODELS
        }
        built = configs.repository_configs(recipe, describe(recipe), role, engines, runtime_for(recipe))
        on_disk = sorted(p.parent.name for p in repo.glob("*/config.pbtxt"))
        assert on_disk == sorted(built)
        for name, cfg in built.items():
            text = (repo / name / "config.pbtxt").read_text()
            parsed = configs.parse_pbtxt(text)
            assert parsed == cfg, name
            assert parsed.name == name
            assert configs.config_problems(parsed, text) == [], name
        assert "${" not in "".join(p.read_text() for p in repo.rglob("*") if p.is_file())


@pytest.mark.parametrize(
    "path", GPU_LLMAPI_RECIPES + REFERENCE_LLMAPI_RECIPES, ids=lambda p: f"{p.parent.name}/{p.stem}"
)
def test_llmapi_config_parses_back_and_has_the_llmapi_contract(path, layout_for):
    """llmapi config.pbtxt@c8c6df0, model.py@b35ac1b: one python model, max_batch_size 0, decoupled as the recipe
    streams, the inputs and outputs of NVIDIA's config.pbtxt: on a GPU its template of llm_api.release (what
    NVIDIA's model.py of that release reads), on the reference runtime the newest template's 22 (@0a71057: its
    model.py refuses LoRA and image_url in a sentence)."""
    from specbuild.repository.llmapi import configs as llmapi_configs
    from specbuild.repository.llmapi import tensors as llmapi_tensors

    recipe = recipe_from(path)
    release = recipe.llm_api.release  # NVIDIA's template of the release, on both runtimes
    layout = layout_for(recipe)
    for role in _roles(recipe):
        repo = write_llmapi_repository(recipe, layout, role)
        assert sorted(p.parent.name for p in repo.glob("*/config.pbtxt")) == ["tensorrt_llm"]
        text = (repo / "tensorrt_llm" / "config.pbtxt").read_text()
        parsed = configs.parse_pbtxt(text)
        assert parsed == llmapi_configs.model_config(recipe)
        assert (parsed.backend, parsed.max_batch_size) == ("python", 0)
        assert parsed.model_transaction_policy.decoupled == recipe.triton.streaming
        assert [i.name for i in parsed.input] == [t.name for t in llmapi_tensors.inputs(release)]
        assert [i.name for i in parsed.input if not i.optional] == ["text_input"]
        assert "${" not in "".join(p.read_text() for p in repo.rglob("*") if p.is_file())


def test_problems_are_found_in_a_bad_config():
    """The check can fail: a template-like config with placeholders and missing/empty must-haves."""
    bad = configs.parse_pbtxt("""
        name: "tensorrt_llm"
        backend: "tensorrtllm"
        max_batch_size: 8
        output [ { name: "output_ids" data_type: TYPE_INT32 dims: [ -1, -1 ] },
                 { name: "output_ids" data_type: TYPE_INT32 dims: [ -1, -1 ] } ]
        parameters { key: "gpt_model_type" value { string_value: "" } }
        parameters { key: "gpt_model_path" value { string_value: "${engine_dir}" } }
        parameters { key: "tokenizer_dir" value { string_value: "" } }
    """)
    problems = configs.config_problems(bad)
    text = "\n".join(problems)
    assert "unfilled" in text
    assert "gpt_model_type is empty" in text
    assert "xgrammar_tokenizer_info_path is missing" in text and "guided_decoding_backend is missing" in text
    assert "tokenizer_dir" not in text  # may be empty (the C++ backend only needs the key)
    assert "output output_ids is declared twice" in text


def test_an_ensemble_reading_an_unproduced_tensor_is_found(layout_for):
    recipe = recipe_from(GPU_RECIPES[0])
    cfg = configs.ensemble_config(recipe, legacy=False)
    cfg.ensemble_scheduling.step[2].input_map["SEQUENCE_LENGTH"] = "_NOBODY"
    assert any("_NOBODY" in p for p in configs.config_problems(cfg))


def _parameters(cfg):
    return {k: v.string_value for k, v in cfg.parameters.items()}


def _by_stem(paths, stem):
    return recipe_from(next(p for p in paths if p.stem == stem))


def _built(recipe, layout, role="target"):
    write_engine_configs(recipe, layout, role)
    repo = write_repository(recipe, describe(recipe), layout, role, flavour=runtime_for(recipe))
    return {p.parent.name: configs.parse_pbtxt(p.read_text()) for p in repo.glob("*/config.pbtxt")}


def test_medusa_and_eagle_parameters(layout_for):
    medusa = _by_stem(GPU_RECIPES, "medusa")
    p = _parameters(_built(medusa, layout_for(medusa))["tensorrt_llm"])
    assert p["decoding_mode"] == "medusa"
    assert p["medusa_choices"] == format_choices(medusa.speculation.choices)
    assert p["medusa_choices"].startswith("{0}, ") and "[" not in p["medusa_choices"]
    eagle = _by_stem(GPU_RECIPES, "eagle")
    p = _parameters(_built(eagle, layout_for(eagle))["tensorrt_llm"])
    assert p["decoding_mode"] == "eagle" and p["eagle_choices"] == format_choices(eagle.speculation.tree)


def test_lookahead_parameters_match_the_engine(layout_for):
    recipe = _by_stem(GPU_RECIPES, "lookahead")
    p = _parameters(_built(recipe, layout_for(recipe))["tensorrt_llm"])
    s = recipe.speculation
    assert (
        p["decoding_mode"],
        p["lookahead_window_size"],
        p["lookahead_ngram_size"],
        p["lookahead_verification_set_size"],
    ) == ("lookahead", str(s.window_size), str(s.ngram_size), str(s.verification_set_size))


def test_draft_target_models(layout_for):
    recipe = _by_stem(GPU_RECIPES, "draft_target")
    built = _built(recipe, layout_for(recipe))
    target, draft, bls = built["tensorrt_llm"], built["tensorrt_llm_draft"], built["tensorrt_llm_bls"]
    for cfg in (target, draft):
        p = _parameters(cfg)
        assert not cfg.model_transaction_policy.decoupled
        assert p["exclude_input_in_output"] == "false"
        assert p["enable_kv_cache_reuse"] == "true"
        assert "decoding_mode" not in p  # the backend has no draft-tokens decoding mode (model_instance_state.cc)
        # both on GPU 0 in this recipe: the KV-cache fraction is split
        assert float(p["kv_cache_free_gpu_mem_fraction"]) == pytest.approx(
            recipe.triton.kv_cache_free_gpu_mem_fraction / 2
        )
    assert _parameters(target)["gpt_model_path"].endswith("/target")
    assert _parameters(draft)["gpt_model_path"].endswith("/draft")
    b = _parameters(bls)
    assert b["tensorrt_llm_draft_model_name"] == "tensorrt_llm_draft"
    assert b["speculative_method"] == "draft_target"
    assert b["default_num_draft_tokens"] == str(recipe.speculation.num_draft_tokens)
    assert b["max_draft_len"] == str(recipe.speculation.max_draft_len)


def test_draft_target_on_separate_gpus(layout_for):
    recipe = _by_stem(GPU_RECIPES, "draft_target")
    recipe = recipe.model_copy(
        update={"triton": recipe.triton.model_copy(update={"gpu_device_ids": [1], "draft_gpu_device_ids": [0]})}
    )
    built = _built(recipe, layout_for(recipe))
    t, d = _parameters(built["tensorrt_llm"]), _parameters(built["tensorrt_llm_draft"])
    assert (t["gpu_device_ids"], d["gpu_device_ids"]) == ("1", "0")
    assert float(t["kv_cache_free_gpu_mem_fraction"]) == recipe.triton.kv_cache_free_gpu_mem_fraction


def test_ensemble_declares_each_output_once_and_maps_every_input(layout_for):
    recipe = _by_stem(GPU_RECIPES, "none")
    ensemble = _built(recipe, layout_for(recipe))["ensemble"]
    names = [t.name for t in ensemble.output]
    assert len(names) == len(set(names))
    assert "kv_cache_alloc_total_blocks" in names and "output_ids" in names
    mapped = set()
    for step in ensemble.ensemble_scheduling.step:
        mapped.update(step.input_map.values())
    assert {t.name for t in ensemble.input} <= mapped


@pytest.mark.parametrize("legacy", [False, True])
def test_tensor_names_by_version(legacy, layout_for):
    recipe = _by_stem(GPU_RECIPES, "none")
    recipe = recipe.model_copy(update={"triton": recipe.triton.model_copy(update={"legacy_tensor_names": legacy})})
    built = _built(recipe, layout_for(recipe))
    new, old = {"seed", "return_num_input_tokens"}, {"random_seed"}
    for model in ("tensorrt_llm", "ensemble", "tensorrt_llm_bls"):
        inputs = {t.name for t in built[model].input}
        assert (old <= inputs and not new & inputs) if legacy else (new <= inputs and not old & inputs), model
    core = {t.name for t in built["tensorrt_llm"].input}
    assert ("min_length" in core, "min_tokens" in core) == (legacy, not legacy)
    for model in ("ensemble", "tensorrt_llm_bls"):  # both spellings of the minimum length, in every release
        assert {"min_tokens", "min_length"} <= {t.name for t in built[model].input}, model
    # the ensemble folds them in preprocessing and hands the core its release's name
    core_step = next(s for s in built["ensemble"].ensemble_scheduling.step if s.model_name == "tensorrt_llm")
    assert core_step.input_map[("min_length" if legacy else "min_tokens")] == "_MIN_TOKENS"
    outputs = {t.name for t in built["tensorrt_llm"].output}
    assert ("num_output_tokens" in outputs) is not legacy


@pytest.mark.parametrize(
    ("installed", "legacy"), [("0.19.0", True), ("0.20.0", False), ("1.2.0rc6", False), (None, False)]
)
def test_tensor_names_follow_the_installed_backend(installed, legacy, layout_for, monkeypatch):
    """triton.legacy_tensor_names null (the default): the names of the installed TensorRT-LLM's backend."""
    from specbuild.trtllm import version

    found = version.TrtllmInstall(installed, "metadata") if installed else None
    monkeypatch.setattr(version, "installed", lambda: found)
    recipe = _by_stem(GPU_RECIPES, "none")
    assert recipe.triton.legacy_tensor_names is None
    built = _built(recipe, layout_for(recipe))
    assert ("random_seed" in {t.name for t in built["tensorrt_llm"].input}) is legacy
    forced = recipe.model_copy(update={"triton": recipe.triton.model_copy(update={"legacy_tensor_names": not legacy})})
    assert ("random_seed" in {t.name for t in _built(forced, layout_for(forced))["tensorrt_llm"].input}) is not legacy
    reference = recipe.model_copy(update={"runtime": "reference"})  # the reference core reads the current names
    assert "seed" in {t.name for t in _built(reference, layout_for(reference))["tensorrt_llm"].input}


def test_every_model_declares_upstreams_optional_inputs(layout_for):
    """A request carrying upstream's optional inputs reaches our models (answered there, never refused by
    Triton's schema check as an unexpected input)."""
    built = _built(_by_stem(GPU_RECIPES, "draft_target"), layout_for(_by_stem(GPU_RECIPES, "draft_target")))
    optional = {
        "lora_task_id",
        "lora_weights",
        "lora_config",
        "guided_decoding_guide_type",
        "guided_decoding_guide",
        "prompt_embedding_table",
        "prompt_table_extra_id",
        "prompt_vocab_size",
        "decoder_text_input",
        "embedding_bias_words",
        "embedding_bias_weights",
        "num_return_sequences",
        "beam_width",
    }
    for model in ("ensemble", "tensorrt_llm_bls"):
        assert optional <= {t.name for t in built[model].input}, model
    assert {
        "image_input",
        "image_bytes_input",
        "image_url_input",
        "video_bytes_input",
        "num_draft_tokens",
        "use_draft_logits",
    } <= {t.name for t in built["tensorrt_llm_bls"].input}
    pre = built["preprocessing"]
    assert {"DECODER_QUERY", "IMAGE_BYTES", "IMAGE_URL", "VIDEO_BYTES", "PROMPT_TABLE_EXTRA_ID"} <= {
        t.name for t in pre.input
    }
    assert {"DECODER_INPUT_ID", "REQUEST_DECODER_INPUT_LEN", "OUT_PROMPT_TABLE_EXTRA_IDS"} <= {
        t.name for t in pre.output
    }
    steps = {s.model_name: s for s in built["ensemble"].ensemble_scheduling.step}
    core = steps["tensorrt_llm"].input_map
    assert (
        core["decoder_input_ids"] == "_DECODER_INPUT_ID"
        and core["decoder_input_lengths"] == "_REQUEST_DECODER_INPUT_LEN"
    )
    assert core["prompt_table_extra_ids"] == "_OUT_PROMPT_TABLE_EXTRA_IDS"
    for name in ("lora_task_id", "lora_weights", "lora_config", "guided_decoding_guide", "prompt_embedding_table"):
        assert core[name] == name
    assert steps["preprocessing"].input_map["DECODER_QUERY"] == "decoder_text_input"


def test_exclude_input_in_output_defaults_to_upstreams_false(layout_for):
    recipe = _by_stem(GPU_RECIPES, "medusa")
    assert recipe.triton.exclude_input_in_output is False
    built = _built(recipe, layout_for(recipe))
    assert _parameters(built["tensorrt_llm"])["exclude_input_in_output"] == "false"
    assert _parameters(built["tensorrt_llm_bls"])["exclude_input_in_output"] == "false"


def test_streaming_makes_the_core_decoupled_except_for_bls_driven_methods(layout_for):
    for stem, core_decoupled in (("medusa", True), ("prompt_lookup", False), ("draft_target", False)):
        recipe = _by_stem(GPU_RECIPES, stem)
        recipe = recipe.model_copy(update={"triton": recipe.triton.model_copy(update={"streaming": True})})
        built = _built(recipe, layout_for(recipe))
        assert built["tensorrt_llm"].model_transaction_policy.decoupled is core_decoupled, stem
        assert built["tensorrt_llm_bls"].model_transaction_policy.decoupled, stem


def test_reference_flavour_differs_only_in_the_core_backend(layout_for):
    gpu = _by_stem(GPU_RECIPES, "medusa")
    ref = gpu.model_copy(update={"runtime": "reference"})
    gpu_built = _built(gpu, layout_for(gpu))
    ref_layout = layout_for(ref)
    ref_built = _built(ref, ref_layout)
    assert set(gpu_built) == set(ref_built)
    for name, cfg in ref_built.items():
        other = type(cfg)()
        other.CopyFrom(gpu_built[name])
        if name == "tensorrt_llm":
            assert (cfg.backend, other.backend) == ("python", "tensorrtllm")
            other.backend = "python"
        assert cfg == other, name
    assert (ref_layout.repository() / "tensorrt_llm" / "1" / "model.py").is_file()
    assert not (ref_layout.repository() / "launch_triton.sh").exists()


def test_core_declares_the_cpp_tensors():
    inputs = {t.name: t for t in tensors.core_inputs()}
    assert not inputs["input_lengths"].optional and not inputs["request_output_len"].optional
    assert inputs["draft_input_ids"].ragged and inputs["draft_logits"].dtype == tensors.LOGITS_DTYPE
    assert {"streaming", "stop", "return_perf_metrics", "exclude_input_in_output"} <= set(inputs)
    outputs = {t.name for t in tensors.core_outputs()}
    assert {
        "acceptance_rate",
        "total_accepted_draft_tokens",
        "total_draft_tokens",
        "output_ids",
        "sequence_length",
    } <= outputs
