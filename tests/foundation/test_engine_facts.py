"""Engine facts, written once (specbuild/facts/engine_facts.py): the rule trtllm-build applies to the limits, reading
it back from a config.json, and the mismatch messages. Expected numbers come from upstream's rules
(tensorrt_llm/commands/build.py, builder.py), computed here by hand."""

from __future__ import annotations

import json

import pytest

from specbuild.facts.engine_facts import (
    SpecMode,
    built_limits,
    limit_mismatches,
    limits_from_config,
    read_engine_config,
    verify_engine,
)
from specbuild.errors import UserError
from specbuild.methods import pack_for
from specbuild.methods.eagle import EagleHead
from specbuild.methods.medusa import MedusaHeads
from specbuild.speculation import Speculation

REQUEST = dict(
    max_batch_size=4, max_input_len=100, max_seq_len=300, max_num_tokens=None, tokens_per_block=32, max_beam_width=1
)


def test_plain_engine_clips_max_num_tokens_to_batch_times_seq_len():
    limits = built_limits(**REQUEST, mode=SpecMode.NONE, max_draft_len=7, extra_seq_len=4)
    assert (limits.max_seq_len, limits.max_draft_len, limits.max_num_tokens) == (300, 0, 4 * 300)


def test_speculative_slack_and_eagle_layers():
    medusa = built_limits(**REQUEST, mode=SpecMode.MEDUSA, max_draft_len=63, extra_seq_len=0)
    eagle = built_limits(**REQUEST, mode=SpecMode.EAGLE, max_draft_len=63, extra_seq_len=4)
    lookahead = built_limits(**REQUEST, mode=SpecMode.LOOKAHEAD_DECODING, max_draft_len=83, extra_seq_len=4)
    assert (medusa.max_seq_len, eagle.max_seq_len, lookahead.max_seq_len) == (363, 367, 383)
    assert eagle.requested_max_seq_len == 300
    wide = built_limits(
        **{**REQUEST, "max_batch_size": 256, "max_num_tokens": 8192},
        mode=SpecMode.EAGLE,
        max_draft_len=63,
        extra_seq_len=4,
    )
    assert wide.max_num_tokens == 256 * 64  # raised to max_batch_size * (max_draft_len + 1)


def test_read_back_recovers_the_request():
    eagle = built_limits(**REQUEST, mode=SpecMode.EAGLE, max_draft_len=10, extra_seq_len=3)
    config = {"build_config": eagle.as_build_config(), "pretrained_config": {"num_eagle_layers": 3}}
    back = limits_from_config(config)
    assert back == eagle and back.requested_max_seq_len == 300
    assert config["build_config"]["speculative_decoding_mode"] == 32  # stored as the IntFlag's int


def test_mismatches_name_the_key_the_values_and_the_recipe_field():
    want = built_limits(**REQUEST, mode=SpecMode.MEDUSA, max_draft_len=8)
    config = {"build_config": {**want.as_build_config(), "max_draft_len": 0, "speculative_decoding_mode": "NONE"}}
    problems = limit_mismatches(config, want)
    assert any(
        "build_config.max_draft_len: the engine has 0, the recipe needs 8 (speculation.max_draft_len" in p
        for p in problems
    )
    assert any("speculative_decoding_mode: the engine has 1 (NONE), the recipe needs 4 (MEDUSA)" in p for p in problems)
    assert limit_mismatches({"build_config": want.as_build_config()}, want) == []


def test_mode_names_as_stored_by_different_releases():
    assert SpecMode.parse("SpeculativeDecodingMode.EAGLE") == SpecMode.EAGLE == SpecMode.parse(32)
    assert SpecMode.parse("MEDUSA").cli_name == "medusa"
    assert SpecMode.parse("bogus") == "bogus"


def test_reading_and_verifying_engine_folders(tmp_path):
    with pytest.raises(UserError, match="no engine config — build the engines first"):
        read_engine_config(tmp_path)
    (tmp_path / "config.json").write_text("[1, 2]")
    with pytest.raises(UserError, match="no build_config section"):
        read_engine_config(tmp_path)
    want = built_limits(**REQUEST, mode=SpecMode.NONE, max_draft_len=0)
    (tmp_path / "config.json").write_text(json.dumps({"version": "1.2.0", "build_config": want.as_build_config()}))
    assert verify_engine(tmp_path, want, "target")["version"] == "1.2.0"
    other = built_limits(**{**REQUEST, "max_batch_size": 8}, mode=SpecMode.NONE, max_draft_len=0)
    with pytest.raises(UserError, match=r"the target engine .* does not match the recipe:\n  build_config.max_batch"):
        verify_engine(tmp_path, other, "target")


def pretrained_extra(spec: Speculation) -> dict:
    return pack_for(spec).pretrained_config(spec)


def test_pretrained_extra_of_the_tree_methods(tmp_path):
    (tmp_path / "config.json").write_text(
        json.dumps({"hidden_size": 64, "vocab_size": 128, "num_hidden_layers": 1, "unrelated": True})
    )
    eagle = Speculation(
        method="eagle",
        mode=SpecMode.EAGLE,
        max_draft_len=9,
        params=EagleHead(tmp_path, num_eagle_layers=3, max_non_leaves_per_layer=2),
    )
    extra = pretrained_extra(eagle)
    assert extra["architecture"] == "EagleForCausalLM" and extra["num_eagle_layers"] == 3
    assert extra["eagle_net_config"] == {
        "architecture": "LlamaForCausalLM",
        "hidden_size": 64,
        "vocab_size": 128,
        "num_hidden_layers": 1,
    }
    medusa = Speculation(method="medusa", mode=SpecMode.MEDUSA, max_draft_len=5, params=MedusaHeads(tmp_path, 4, 1))
    assert pretrained_extra(medusa) == {
        "architecture": "MedusaForCausalLM",
        "max_draft_len": 5,
        "num_medusa_heads": 4,
        "num_medusa_layers": 1,
    }
    assert pretrained_extra(Speculation(method="none", mode=SpecMode.NONE)) == {}
