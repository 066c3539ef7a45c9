"""The MTP pack: its section's rules (one draft-length key, relaxed acceptance only with validation.require_lossless
false, thinking tokens of the target's vocabulary), model.yaml per release (max_draft_len at 1.3,
num_nextn_predict_layers before, the relaxed fields) read back by the CPU rehearsal into the decoder's keys, and the
lossless check's verdict on a relaxed deployment: it does not apply, and the report says why."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specbuild.errors import RecipeError
from specbuild.load import load_build
from specbuild.methods import describe
from specbuild.methods.mtp import RELEASES_NAMING_MAX_DRAFT_LEN
from specbuild.recipe import load_recipe
from specbuild.recipe.llm_api import RELEASES
from specbuild.reference.llmapi_yaml import ModelYamlError, read_model_yaml
from specbuild.repository.llmapi import model_yaml

ROOT = Path(__file__).resolve().parents[2]
MTP_TARGET = ROOT / "checkpoints" / "tiny" / "mtp-target"
RELAXED = {"top_k": 3, "delta": 0.2, "begin_thinking_token": 4000, "end_thinking_token": 4001}


def recipe_file(tmp_path: Path, speculation: dict, *, release: str = "1.3", **validation) -> Path:
    path = tmp_path / "mtp.json"
    path.write_text(
        json.dumps(
            {
                "name": "mtp",
                "runtime": "reference",
                "flavour": "llm-api",
                "model": {"checkpoint": str(MTP_TARGET), "dtype": "float32"},
                "speculation": {"method": "mtp", **speculation},
                "llm_api": {"release": release},
                "validation": {"prompts": ["def f(x):"], **validation},
            }
        )
    )
    return path


def problems(path: Path) -> list[str]:
    with pytest.raises(RecipeError) as caught:
        load_build(path)
    return [f"{p.field}: {p.message}" for p in caught.value.problems]


def test_the_section_s_rules(tmp_path):
    build = load_build(recipe_file(tmp_path, {"max_draft_len": 3}))
    assert build.spec.max_draft_len == 3 and build.spec.params.not_lossless() is None
    assert load_build(recipe_file(tmp_path, {"num_nextn_predict_layers": 2})).spec.max_draft_len == 2  # the old key
    assert problems(recipe_file(tmp_path, {"max_draft_len": 3, "num_nextn_predict_layers": 3})) == [
        "speculation.num_nextn_predict_layers: and max_draft_len both give the draft length — keep one "
        "(max_draft_len: TensorRT-LLM 1.3's name)"
    ]
    refused = problems(recipe_file(tmp_path, {"relaxed_acceptance": RELAXED}))
    assert len(refused) == 1 and refused[0].startswith(
        "speculation.relaxed_acceptance: is not lossless: in the thinking phase it accepts drafts the target's greedy "
        "decoding would not choose — set validation.require_lossless: false"
    )
    relaxed = load_build(recipe_file(tmp_path, {"relaxed_acceptance": RELAXED}, require_lossless=False))
    assert "relaxed acceptance in the thinking phase" in relaxed.spec.params.not_lossless()
    # the defaults are DeepSeek-R1's <think> / </think> ids: not tokens of a 4096-token vocabulary
    beyond = problems(recipe_file(tmp_path, {"relaxed_acceptance": {"top_k": 2}}, require_lossless=False))
    assert [p.split(": ")[:2] for p in beyond] == [  # located where the recipe writes them: the section
        [
            "speculation.relaxed_acceptance",
            "begin_thinking_token 128798 is not a token id of the target (its vocabulary has 4096)",
        ],
        [
            "speculation.relaxed_acceptance",
            "end_thinking_token 128799 is not a token id of the target (its vocabulary has 4096)",
        ],
    ]
    same = dict(RELAXED, end_thinking_token=4000)
    assert problems(recipe_file(tmp_path, {"relaxed_acceptance": same}, require_lossless=False)) == [
        "speculation.relaxed_acceptance.end_thinking_token: is the begin token too (4000) — give the ids of the "
        "model's own begin and end thinking tokens (DeepSeek-R1: <think> 128798, </think> 128799)"
    ]


def _speculative_config(path: Path, release: str) -> dict:
    recipe = load_recipe(path)
    recipe = recipe.model_copy(update={"llm_api": recipe.llm_api.model_copy(update={"release": release})})
    return model_yaml.model_yaml(recipe, describe(recipe), role="target")


@pytest.mark.parametrize("release", RELEASES)
def test_model_yaml_per_release_is_read_back_by_the_rehearsal(tmp_path, release):
    path = recipe_file(tmp_path, {"max_draft_len": 3, "relaxed_acceptance": RELAXED}, require_lossless=False)
    data = _speculative_config(path, release)
    length = "max_draft_len" if release in RELEASES_NAMING_MAX_DRAFT_LEN else "num_nextn_predict_layers"
    assert data["speculative_config"] == {
        "decoding_type": "MTP",
        length: 3,
        "use_relaxed_acceptance_for_thinking": True,
        "relaxed_topk": 3,
        "relaxed_delta": 0.2,
        "begin_thinking_phase_token": 4000,
        "end_thinking_phase_token": 4001,
    }
    (tmp_path / "model.yaml").write_text(model_yaml.dump(data))
    settings = read_model_yaml(tmp_path / "model.yaml")
    assert (settings.method, settings.max_draft_len, settings.model_dir) == ("mtp", 3, MTP_TARGET)
    assert settings.decoding == {
        "max_draft_len": 3,
        "use_mtp_vanilla": False,
        "use_relaxed_acceptance_for_thinking": True,
        "relaxed_topk": 3,
        "relaxed_delta": 0.2,
        "begin_thinking_phase_token": 4000,
        "end_thinking_phase_token": 4001,
    }


def test_the_rehearsal_refuses_what_it_does_not_run(tmp_path):
    data = {
        "model": str(MTP_TARGET),
        "max_batch_size": 4,
        "max_seq_len": 256,
        "max_input_len": 128,
        "triton_config": {"max_batch_size": 0, "decoupled": True},
    }
    for spec, message in (
        ({"decoding_type": "MTP", "max_draft_len": 2, "dynamic_tree_max_topK": 4}, "MTP's dynamic tree is not"),
        ({"decoding_type": "MTP", "num_nextn_predict_layers": 2, "relaxed_topk": 0}, "relaxed_topk"),
        ({"decoding_type": "MTP", "max_draft_len": 2, "relaxed_delta": -0.1}, "relaxed_delta"),
        ({"decoding_type": "MTP", "max_draft_len": 2, "mtp_layers": 1}, "mtp_layers"),  # not a field
    ):
        (tmp_path / "model.yaml").write_text(model_yaml.dump({**data, "speculative_config": spec}))
        with pytest.raises(ModelYamlError, match=message):
            read_model_yaml(tmp_path / "model.yaml")
    # up to 1.2 num_nextn_predict_layers sets max_draft_len (MTPDecodingConfig's validator)
    (tmp_path / "model.yaml").write_text(
        model_yaml.dump({**data, "speculative_config": {"decoding_type": "MTP", "num_nextn_predict_layers": 2}})
    )
    assert read_model_yaml(tmp_path / "model.yaml").max_draft_len == 2


def test_the_lossless_check_does_not_apply_to_relaxed_acceptance(tmp_path):
    """The suite's lossless check on a relaxed deployment: skipped, its summary saying why (what the report shows);
    no request is sent to either deployment."""
    from specbuild.validate.checks import lossless
    from specbuild.validate.checks.base import SuiteContext, SuiteOptions

    class Unreachable:
        def generate(self, *a, **k):
            raise AssertionError("the lossless check sent a request")

    recipe = load_recipe(recipe_file(tmp_path, {"relaxed_acceptance": RELAXED}, require_lossless=False))
    spec = describe(recipe)
    ctx = SuiteContext(recipe, spec, [], Unreachable(), Unreachable(), None, SuiteOptions(), lambda *a: None)
    result = lossless.run(ctx)
    assert result.status == "skipped" and result.gate is None
    assert result.summary.startswith("does not apply: relaxed acceptance in the thinking phase accepts a draft that")
    assert result.details["not_lossless"] == spec.params.not_lossless()
