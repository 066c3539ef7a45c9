"""The `sa_config` enhancer as a recipe key of eagle3 and mtp (TensorRT-LLM 1.3's SAEnhancerConfig, llm_args.py@0004396:
threshold 4, enable_global_pool): validated like every key, written into model.yaml at 1.3 and refused with the
reason at releases without it, read back by the CPU rehearsal into the reference decoder's keys; the override of a
drafted chain (methods/suffix_automaton/enhancer.py) on rows whose text repeats."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from specbuild.errors import RecipeError

REPO = Path(__file__).resolve().parents[2]


def recipe_file(tmp_path, method: str, release: str = "1.3", **speculation) -> Path:
    base = {"eagle3": "llmapi_eagle3", "mtp": "llmapi_mtp"}[method]
    data = yaml.safe_load((REPO / "recipes" / "reference" / f"{base}.yaml").read_text())
    for key in ("checkpoint",):
        if key in data["speculation"]:
            data["speculation"][key] = str((REPO / "recipes" / "reference" / data["speculation"][key]).resolve())
    data["model"]["checkpoint"] = str((REPO / "recipes" / "reference" / data["model"]["checkpoint"]).resolve())
    data["validation"].pop("prompts", None)
    data["speculation"].update(speculation)
    data.setdefault("llm_api", {})["release"] = release
    path = tmp_path / f"{method}-{release}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def target_yaml(path) -> dict:
    from specbuild.methods import describe
    from specbuild.recipe import load_recipe
    from specbuild.repository.llmapi.model_yaml import model_yaml

    recipe = load_recipe(path, check_files=False)
    return model_yaml(recipe, describe(recipe), role="target")


@pytest.mark.parametrize("method", ["eagle3", "mtp"])
def test_model_yaml_at_1_3_carries_sa_config(tmp_path, method):
    spec = target_yaml(recipe_file(tmp_path, method, sa_config={"threshold": 6, "enable_global_pool": True}))
    assert spec["speculative_config"]["sa_config"] == {"threshold": 6, "enable_global_pool": True}
    spec = target_yaml(recipe_file(tmp_path, method, sa_config={}))
    assert spec["speculative_config"]["sa_config"] == {"threshold": 4, "enable_global_pool": False}  # upstream's
    assert "sa_config" not in target_yaml(recipe_file(tmp_path, method))["speculative_config"]


@pytest.mark.parametrize("method", ["eagle3", "mtp"])
@pytest.mark.parametrize("release", ["1.1", "1.2"])
def test_a_release_without_sa_config_refuses_it_with_the_reason(tmp_path, method, release):
    from specbuild.recipe import load_recipe

    with pytest.raises(RecipeError, match=r"sa_config \(SAEnhancerConfig\) is in llm_args.py of main after 1.3.0rc3"):
        load_recipe(recipe_file(tmp_path, method, release, sa_config={"threshold": 4}), check_files=False)


@pytest.mark.parametrize(
    ("sa_config", "words"),
    [
        ({"threshold": 0}, "threshold"),
        ({"threshold": 4, "use_sa_spec": True}, "unknown key 'use_sa_spec'"),  # DOCS' spelling, not a field
        ({"enable_global_pool": "maybe"}, "enable_global_pool"),
    ],
)
def test_the_recipe_key_is_validated(tmp_path, sa_config, words):
    from specbuild.recipe import load_recipe

    with pytest.raises(RecipeError, match=words):
        load_recipe(recipe_file(tmp_path, "eagle3", sa_config=sa_config), check_files=False)


def test_a_dynamic_tree_is_not_enhanced(tmp_path):
    from specbuild.recipe import load_recipe

    path = recipe_file(tmp_path, "eagle3", sa_config={"threshold": 4}, dynamic_tree={"top_k": 2})
    with pytest.raises(RecipeError, match="sa_config.*overrides a chain of drafts"):
        load_recipe(path, check_files=False)


@pytest.mark.parametrize("method", ["eagle3", "mtp"])
def test_the_rehearsal_reads_sa_config_into_the_decoders_keys(method):
    from specbuild.methods import METHODS
    from specbuild.methods.suffix_automaton.enhancer import GLOBAL_POOL_KEY, THRESHOLD_KEY

    pack = METHODS[method]
    given = {"decoding_type": "Eagle3" if method == "eagle3" else "MTP", "max_draft_len": 3}
    if method == "eagle3":
        given["speculative_model"] = "/heads/eagle3"
    config = pack.rehearsal_config.model_validate({**given, "sa_config": {"threshold": 5, "enable_global_pool": True}})
    decoding = pack.rehearse(config, 3).decoding
    assert decoding[THRESHOLD_KEY] == 5 and decoding[GLOBAL_POOL_KEY] is True
    assert THRESHOLD_KEY not in pack.rehearse(pack.rehearsal_config.model_validate(given), 3).decoding
    with pytest.raises(ValueError):  # upstream's spelling only (extra keys are refused, as SAEnhancerConfig does)
        pack.rehearsal_config.model_validate({**given, "sa_config": {"sa_spec_threshold": 4}})


# ---------------------------------------------------------------- the override on drafted chains


@dataclass
class Row:
    request_id: int
    tokens: list[int]


@dataclass
class Chain:
    tokens: list[int]  # [root, drafts...]
    made: bool = field(default=False)


def chain(root, drafts):
    return Chain([root, *drafts], made=True)


def test_a_long_enough_match_replaces_the_chain_and_a_short_one_does_not():
    from specbuild.methods.suffix_automaton.enhancer import SaEnhancer

    text = [1, 2, 3, 4, 5, 6, 7, 9, 1, 2, 3, 4, 5]  # suffix 1 2 3 4 5 (5 tokens) occurred before, then 6 7 9
    enhancer = SaEnhancer(threshold=5, enable_global_pool=False, max_batch_size=2)
    rows = [Row(0, text), Row(1, [8, 8, 3, 1, 2])]  # row 1: its suffix "2"? no earlier occurrence of a long match
    out = enhancer.override(rows, [Chain([5, 40, 41]), Chain([2, 50, 51])], chain)
    assert out[0].tokens == [5, 6, 7] and out[0].made  # the automaton's continuation, as long as the chain
    assert out[1].tokens == [2, 50, 51] and not out[1].made
    assert enhancer.overridden == 1
    stricter = SaEnhancer(threshold=6, enable_global_pool=False, max_batch_size=2)
    assert stricter.override(rows[:1], [Chain([5, 40, 41])], chain)[0].tokens == [5, 40, 41]
