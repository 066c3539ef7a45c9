"""Each documented failure of the engine path ends in one clear UserError, and nothing half-written stays behind."""

from __future__ import annotations

import dataclasses
import json

import pytest
from trtllm_helpers import leftovers

from specbuild.errors import UserError
from specbuild.methods import describe
from specbuild.runtimes import runtime_for


def _edit_build(plan, role="target", set_flags=None, add_flags=()):
    """Replace the role's build step by one with changed flags (steps are frozen: a plan edited past the check)."""
    i = next(i for i, s in enumerate(plan.steps) if s.kind == "build" and s.role == role)
    step = plan.steps[i]
    flags = tuple((f, (set_flags or {}).get(f, v)) for f, v in step.flags) + tuple(add_flags)
    plan.steps[i] = dataclasses.replace(step, flags=flags)


def test_flag_missing_from_help_stops_before_building(machine, write_recipe, compile_engines):
    machine.set("SPECBUILD_DOUBLE_DROP_FLAGS", "--kv_cache_type")  # a release without the flag
    machine.set("SPECBUILD_DOUBLE_TRTLLM_VERSION", "0.17.0")
    with pytest.raises(UserError) as e:
        compile_engines(write_recipe("none"))
    msg = str(e.value)
    assert "--kv_cache_type is not an option of this trtllm-build" in msg and "TensorRT-LLM 0.17.0" in msg
    assert not (machine.root / "engines" / "none").exists()  # checked before the first conversion
    assert not leftovers(machine.root)


def test_help_parsing_ignores_flags_only_mentioned_in_help_text(machine, write_recipe, compile_engines):
    # --max_num_tokens' help text says "``--remove_input_padding disable``": dropping the real option must still be
    # reported, so mentions in help sentences do not count as declarations.
    machine.set("SPECBUILD_DOUBLE_DROP_FLAGS", "--remove_input_padding")
    with pytest.raises(UserError, match="--remove_input_padding is not an option"):
        compile_engines(write_recipe("none"))


def test_builder_assert_eagle_batch_limit(machine, write_recipe, compile_engines):
    # The recipe check refuses this; a plan edited past it meets the builder's assert (tensorrt_llm/builder.py).
    with pytest.raises(UserError) as e:
        compile_engines(write_recipe("eagle"), mutate=lambda p: _edit_build(p, set_flags={"--max_batch_size": "600"}))
    msg = str(e.value)
    assert "trtllm-build of the target engine exited with status 1" in msg
    assert "EAGLE requires max_batch_size <= 512" in msg
    assert "to rerun by hand: trtllm-build --checkpoint_dir engines/eagle/checkpoints/target" in msg
    assert "--max_batch_size 600" in msg
    assert not (machine.root / "engines" / "eagle" / "target").exists()
    assert not leftovers(machine.root)


def test_context_logits_with_drafts_is_refused_by_trtllm_build(machine, write_recipe, compile_engines):
    with pytest.raises(UserError, match="Gather context logits is not support with draft len > 0"):
        compile_engines(
            write_recipe("prompt_lookup", validation={"require_lossless": False}),
            mutate=lambda p: _edit_build(p, add_flags=[("--gather_context_logits", None)]),
        )


def test_invalid_choice_is_caught_before_running(machine, write_recipe, compile_engines):
    with pytest.raises(UserError, match=r"--gemm_plugin fp4: this trtllm-build accepts \{auto,float16"):
        compile_engines(write_recipe("none"), mutate=lambda p: _edit_build(p, set_flags={"--gemm_plugin": "fp4"}))


def test_build_crash_shows_tail_log_and_rerun_command(machine, write_recipe, compile_engines):
    machine.set("SPECBUILD_DOUBLE_FAULT", "build:oom")
    with pytest.raises(UserError) as e:
        compile_engines(write_recipe("none"))
    msg = str(e.value)
    assert "exited with status 1" in msg and "out of memory" in msg
    assert "full log: engines/none/logs/build-target.log" in msg
    assert "to rerun by hand: trtllm-build --checkpoint_dir" in msg
    log = (machine.root / "engines" / "none" / "logs" / "build-target.log").read_text()
    assert log.startswith("$ ") and "Traceback" in log
    assert not (machine.root / "engines" / "none" / "target").exists()
    assert not leftovers(machine.root)


def test_engine_that_differs_from_the_recipe_stops_the_pipeline(machine, write_recipe, compile_engines):
    machine.set("SPECBUILD_DOUBLE_FAULT", "build:ignore_max_draft_len")
    with pytest.raises(UserError) as e:
        compile_engines(write_recipe("prompt_lookup", validation={"require_lossless": False}))
    msg = str(e.value)
    assert "build_config.max_draft_len: the engine has 0, the recipe needs 5" in msg
    assert "build_config.max_seq_len: the engine has 256, the recipe needs 261" in msg


def test_converter_crash_is_reported_and_cleaned(machine, write_recipe, compile_engines):
    machine.set("SPECBUILD_DOUBLE_FAULT", "convert:oom")
    with pytest.raises(UserError) as e:
        compile_engines(write_recipe("none"))
    msg = str(e.value)
    assert "converting the target checkpoint exited with status 1" in msg and "CUDA out of memory" in msg
    assert "to rerun by hand: python -m specbuild.trtllm.convert_worker engines/none/logs/convert-target.json" in msg
    spec = json.loads((machine.root / "engines" / "none" / "logs" / "convert-target.json").read_text())
    assert spec["output_dir"] == str(machine.root / "engines" / "none" / "checkpoints" / "target")
    assert not (machine.root / "engines" / "none" / "checkpoints" / "target").exists()
    assert not leftovers(machine.root)


def test_converter_killed_by_a_signal(machine, write_recipe, compile_engines):
    machine.set("SPECBUILD_DOUBLE_FAULT", "convert:segv")
    with pytest.raises(UserError, match="killed by signal SIGSEGV"):
        compile_engines(write_recipe("none"))
    assert not leftovers(machine.root)


def test_missing_example_script(machine, write_recipe, compile_engines, tmp_path):
    empty = tmp_path / "examples"
    empty.mkdir()
    with pytest.raises(UserError, match=r"examples/medusa/convert_checkpoint.py does not exist"):
        compile_engines(write_recipe("medusa"), examples=empty)
    assert not (machine.root / "engines").exists()


def test_checkpoint_check_names_the_ignored_argument(tmp_path):
    from specbuild.trtllm.convert import check_checkpoint

    (tmp_path / "config.json").write_text(
        json.dumps({"mapping": {"world_size": 1}, "num_medusa_heads": 4, "dtype": "float16"})
    )
    (tmp_path / "rank0.safetensors").write_bytes(b"")
    with pytest.raises(UserError, match=r"num_medusa_heads is 4, the recipe needs 3"):
        check_checkpoint(tmp_path, 1, {"num_medusa_heads": 3, "dtype": "float16"}, "ckpt")
    with pytest.raises(UserError, match=r"missing rank1.safetensors"):
        check_checkpoint(tmp_path, 2, {}, "ckpt")


def test_reference_engines_are_refused_by_the_repository_of_a_gpu_recipe(
    machine, write_recipe, compile_engines, tmp_path
):
    """An engine folder the other runtime built is named as such before anything is written (repository/engine/engine_check.py)."""
    from specbuild.repository.engine.writer import write_repository

    compiled = compile_engines(write_recipe("none", runtime="reference"))
    gpu = compile_engines.load(write_recipe("none"))
    with pytest.raises(UserError, match="built for the reference runtime but the recipe says runtime: tensorrt-llm"):
        write_repository(gpu, describe(gpu), compiled.layout, flavour=runtime_for(gpu))
