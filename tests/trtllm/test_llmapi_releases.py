"""model.yaml spellings per TensorRT-LLM release, held against the parse path each release has upstream.

The maps are the double's (tests/doubles/tensorrt_llm/llmapi/llm_args.py FROM_DICT_MAPS / UNION_TAGS), each written
from tensorrt_llm/llmapi/llm_args.py of its release and citing it; specbuild's table (specbuild.repository.llmapi.releases) is
not used to compute what is expected. Compile on a machine with TensorRT-LLM hands every model.yaml to the installed
release's update_llm_args_with_extra_dict and TorchLlmArgs (here: the double's) and stops on their error.
"""

from __future__ import annotations

import ast
import importlib.util
import json

import pytest
from trtllm_helpers import DOUBLES

from specbuild.errors import RecipeError, UserError

METHODS = ("draft_target", "prompt_lookup", "eagle3", "mtp")


def double_llm_args():
    """The double's llm_args module, loaded by path: its maps need no tensorrt_llm import (which would fix the
    double's version for the whole test process)."""
    path = DOUBLES / "tensorrt_llm" / "llmapi" / "llm_args.py"
    spec = importlib.util.spec_from_file_location("double_llm_args", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


UPSTREAM = double_llm_args()


def written(llmapi_recipe, method: str, release: str, **sections) -> dict:
    """The target model.yaml specbuild writes for this method and release (no compile: the dict itself)."""
    from specbuild.repository.llmapi.model_yaml import model_yaml
    from specbuild.methods import describe
    from specbuild.recipe import load_recipe

    if method == "eagle3" and release == "1.0":  # 1.0 has no eagle3_layers_to_capture: the head's default set
        sections = {"speculation": {"method": "eagle3", "checkpoint": "models/eagle3", "max_draft_len": 3}}
    path = llmapi_recipe(method, release, **sections)
    if "speculation" in sections:
        data = json.loads(path.read_text())
        data["speculation"] = sections["speculation"]
        path.write_text(json.dumps(data))
    recipe = load_recipe(path, check_files=False)
    return model_yaml(recipe, describe(recipe), role="target")


@pytest.mark.parametrize("release", ["1.0", "1.1", "1.2"])
def test_no_model_yaml_for_1_0_to_1_2_carries_a_decoding_type_from_dict_refuses(machine, llmapi_recipe, release):
    """DecodingBaseConfig.from_dict of 1.0 and 1.1 (and of 1.3.0rc3, the neighbour after 1.2) knows DraftTarget,
    not Draft_Target; 1.2's source was not read, so its map is what both neighbours accept."""
    known = UPSTREAM.FROM_DICT_MAPS[release]
    assert "Draft_Target" not in known and "DraftTarget" in known  # the trap: the class's ClassVar is Draft_Target
    for method in METHODS:
        spec = written(llmapi_recipe, method, release)["speculative_config"]
        assert spec["decoding_type"] in known, (method, release, spec["decoding_type"], sorted(known))
        fields = UPSTREAM._fields(release, spec["decoding_type"])
        assert set(spec) - {"decoding_type"} <= fields, (method, release, set(spec) - fields)
        if method in ("draft_target", "eagle3"):
            assert "speculative_model_dir" in spec and "speculative_model" not in spec


def test_1_3_is_written_for_the_union_and_1_3_0rc3_refuses_it(machine, llmapi_recipe):
    """After 1.3.0rc3 speculative_config is a discriminated union (Draft_Target, Eagle3, ...); 1.3.0rc0-rc3 still
    parse through from_dict, which refuses Draft_Target: what compile stops on there (below)."""
    for method in METHODS:
        spec = written(llmapi_recipe, method, "1.3")["speculative_config"]
        assert spec["decoding_type"] in UPSTREAM.UNION_TAGS
    spec = written(llmapi_recipe, "draft_target", "1.3")["speculative_config"]
    assert spec["decoding_type"] == "Draft_Target" and "Draft_Target" not in UPSTREAM.FROM_DICT_MAPS["1.3.0rc3"]
    assert UPSTREAM.line("1.3.0rc3") == "1.3.0rc3" and UPSTREAM.line("1.3.0rc7") == "1.3"


def _calls(log) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def test_compile_hands_every_model_yaml_to_the_installed_releases_parse_functions(machine, llmapi_recipe, tmp_path):
    from specbuild.cli import main
    from specbuild.repository.llmapi.model_yaml import load

    log = tmp_path / "calls.jsonl"
    machine.set("SPECBUILD_DOUBLE_TRTLLM_VERSION", "1.2.1")
    machine.set("SPECBUILD_DOUBLE_CALL_LOG", str(log))
    recipe = llmapi_recipe("draft_target", "1.2")
    assert main(["compile", str(recipe), "--no-validate", "--repo-dir", str(tmp_path / "triton_repo")]) == 0
    repos = {
        "target": tmp_path / "triton_repo" / "llmapi-draft-target",
        "baseline": tmp_path / "triton_repo" / "llmapi-draft-target-baseline",
    }
    wanted = []
    for repo in repos.values():
        data = load((repo / "tensorrt_llm" / "1" / "model.yaml").read_text())
        data.pop("triton_config")
        wanted.append(data)
    calls = _calls(log)
    parsed = [
        ast.literal_eval(c["args"]["llm_args_dict"]["value"])
        for c in calls
        if c["call"] == "update_llm_args_with_extra_dict"
    ]
    assert parsed == wanted  # each repository's model.yaml, as written, minus triton_config
    built = [c["args"] for c in calls if c["call"] == "TorchLlmArgs"]
    assert len(built) == 2
    # 1.2 parses through from_dict: the argument class got the config object, not the dict
    assert built[0]["speculative_config"]["type"] == "DecodingConfig"
    assert "speculative_config" not in built[1]


def test_compile_stops_on_the_installed_releases_error_and_writes_nothing(machine, llmapi_recipe, tmp_path, capsys):
    """1.3.0rc3 still parses through from_dict: it lies before the 1.3 line (1.3.0rc7 and later), so compile refuses it
    before writing anything, with the reason; handed the 1.3 spelling anyway, the release's own parser refuses
    Draft_Target with upstream's message."""
    from specbuild.cli import main
    from specbuild.repository.llmapi.model_yaml import dump
    from specbuild.recipe import load_recipe
    from specbuild.trtllm.llmapi_parse import check_model_yaml
    from specbuild.trtllm.version import installed

    machine.set("SPECBUILD_DOUBLE_TRTLLM_VERSION", "1.3.0rc3")
    recipe = llmapi_recipe("draft_target", "1.3")
    code = main(["compile", str(recipe), "--no-validate", "--repo-dir", str(tmp_path / "triton_repo")])
    err = capsys.readouterr().err
    assert code == 2
    assert "TensorRT-LLM 1.3.0rc3 lies before the 1.3 line specbuild writes (1.3.0rc7 and later)" in err, err
    assert "refuse Draft_Target" in err and 'llm_api.release: "1.2"' in err
    assert not (tmp_path / "triton_repo").exists() and not (tmp_path / "deploy").exists()
    text = dump(written(llmapi_recipe, "draft_target", "1.3"))
    with pytest.raises(
        UserError, match="1.3.0rc3 refuses the model.yaml written for it — ValueError: Invalid decoding"
    ):
        check_model_yaml(text, installed(), load_recipe(recipe, check_files=False), "target")


def test_compile_stops_on_an_argument_the_release_refuses(machine, llmapi_recipe, tmp_path, capsys):
    """Not only decoding types: the installed release's argument class refuses keys it does not know (a 1.1 EAGLE-3
    model.yaml carries eagle3_layers_to_capture, which 1.0 does not have)."""
    from specbuild.errors import UserError
    from specbuild.repository.llmapi.model_yaml import dump
    from specbuild.recipe import load_recipe
    from specbuild.trtllm.llmapi_parse import check_model_yaml
    from specbuild.trtllm.version import installed

    machine.set("SPECBUILD_DOUBLE_TRTLLM_VERSION", "1.0.0")
    recipe = load_recipe(llmapi_recipe("eagle3", "1.1"), check_files=False)
    text = dump(written(llmapi_recipe, "eagle3", "1.1"))
    with pytest.raises(UserError, match="speculative_config.eagle3_layers_to_capture: Extra inputs are not permitted"):
        check_model_yaml(text, installed(), recipe, "target")


def test_check_says_what_is_not_known_of_a_release(machine, llmapi_recipe, capsys):
    from specbuild.cli import main

    assert main(["check", str(llmapi_recipe("draft_target", "1.1"))]) == 0
    out = capsys.readouterr().out.splitlines()
    notes = [line for line in out if "note:" in line and "preflight" not in line and "validation.prompts" not in line]
    # which release and why, and the source's date (nothing else unknown; the preflight's and prompt set's aside)
    assert len(notes) == 2 and "llm_api.release 1.1: written in the recipe" in notes[0], notes
    assert main(["check", str(llmapi_recipe("draft_target", "1.2"))]) == 0
    out = capsys.readouterr().out
    assert "note: llm_api.release 1.2: the 1.2.x llm_args.py itself was not read" in out
    schedule = {"draft_len_schedule": {1: 4, 3: 0}}
    assert main(["check", str(llmapi_recipe("draft_target", "1.2", adaptive=schedule))]) == 0
    assert "draft_len_schedule was read only in llm_args.py after 1.3.0rc3" in capsys.readouterr().out
    assert main(["check", str(llmapi_recipe("draft_target", "1.3"))]) == 0
    assert "1.3.0rc0-rc3 still parse through from_dict" in capsys.readouterr().out
    assert main(["check", str(llmapi_recipe("none", "1.2"))]) == 0
    out = capsys.readouterr().out.splitlines()
    # no speculative_config, nothing unknown (which release and why, and the prompt set's notes aside)
    notes = [line for line in out if "note:" in line and "validation.prompts" not in line]
    assert len(notes) == 1 and "llm_api.release 1.2: written in the recipe" in notes[0], notes


def test_a_1_2_schedule_that_needs_draft_len_schedule_is_refused(machine, llmapi_recipe):
    with pytest.raises(RecipeError, match="draft_len_schedule is known only from sources after 1.3.0rc3"):
        from specbuild.recipe import load_recipe

        load_recipe(llmapi_recipe("draft_target", "1.2", adaptive={"draft_len_schedule": {1: 4, 2: 2, 4: 0}}))


def test_readme_table_says_what_specbuild_writes(llmapi_recipe, machine):
    """docs/recipes.md 'LLM-API releases': each release's row names the spellings model.yaml gets."""
    from trtllm_helpers import REPO

    text = (REPO / "docs" / "recipes.md").read_text()
    table = text[text.index("## LLM-API releases") :]
    table = table[: table.index("\n\n", table.index("| release"))]
    rows = {
        cells[0]: cells
        for cells in (
            [c.strip().strip("`") for c in line.strip("|").split("|")]
            for line in table.splitlines()
            if line.startswith("| 1.")
        )
    }
    assert sorted(rows) == ["1.0", "1.1", "1.2", "1.3"]
    for release, cells in rows.items():
        spec = {m: written(llmapi_recipe, m, release)["speculative_config"] for m in METHODS}
        row = " ".join(cells)
        for method in METHODS:
            assert spec[method]["decoding_type"] in row, (release, method)
        assert (
            "speculative_model_dir" if "speculative_model_dir" in spec["draft_target"] else "speculative_model"
        ) in row


def _example_recipes():
    from trtllm_helpers import REPO

    return sorted(p for d in ("reference", "tensorrt-llm") for p in (REPO / "recipes" / d).glob("llmapi_*.yaml"))


@pytest.mark.parametrize("path", _example_recipes(), ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_example_model_yaml_parses_through_its_releases_source(path, tmp_path, machine):
    """Issue #40 done-when: each example recipe's model.yaml, at the line it is written for and at 1.3 (with
    sa_config where the method takes it), passes the double's llm_args of that line (the sheet's source for 1.3,
    @0004396): the default never writes a spelling its target refuses."""
    import yaml

    from specbuild.methods import describe
    from specbuild.recipe import load_recipe
    from specbuild.repository.llmapi.model_yaml import model_yaml

    data = yaml.safe_load(path.read_text())
    for key in ("model", "speculation"):
        section = data.get(key) or {}
        for field in ("checkpoint", "draft_checkpoint"):
            if isinstance(section.get(field), str) and section[field].startswith("."):
                section[field] = str((path.parent / section[field]).resolve())
    data.get("validation", {}).pop("prompts", None)
    variants = [data, {**data, "llm_api": {**(data.get("llm_api") or {}), "release": "1.3"}}]
    if data["speculation"]["method"] in ("eagle3", "mtp"):
        sa = {**data["speculation"], "sa_config": {"threshold": 5, "enable_global_pool": True}}
        variants.append({**variants[1], "speculation": sa})
    for i, variant in enumerate(variants):
        written = tmp_path / f"{i}.yaml"
        written.write_text(yaml.safe_dump(variant))
        recipe = load_recipe(written, check_files=False)
        spec = model_yaml(recipe, describe(recipe), role="target").get("speculative_config")
        if spec is None:
            continue
        line = recipe.llm_api.release
        problems = UPSTREAM.validate_speculative_config(dict(spec), line)
        assert problems == [], (path.name, line, spec, problems)
        if i == 2:
            assert spec["sa_config"] == {"threshold": 5, "enable_global_pool": True}


def test_the_double_refuses_what_the_1_3_source_refuses(machine):
    """The double's 1.3 rules for the new members (llm_args.py@0004396), so the test above can fail."""
    v = UPSTREAM.validate_speculative_config
    assert v({"decoding_type": "SA", "max_draft_len": 4, "max_matching_ngram_size": 0}, "1.3")
    assert v({"decoding_type": "SA", "max_draft_len": 4}, "1.2")  # not in from_dict's map
    assert v(
        {"decoding_type": "Eagle3", "max_draft_len": 3, "speculative_model": "h", "sa_config": {"use_sa_spec": 1}},
        "1.3",
    )
    assert v({"decoding_type": "MTP", "max_draft_len": 1, "sa_config": {"threshold": 0}}, "1.3")
    assert v({"decoding_type": "MTP", "num_nextn_predict_layers": 1, "sa_config": {"threshold": 4}}, "1.2")
    assert v({"decoding_type": "DraftTarget", "max_draft_len": 3, "speculative_model": "d"}, "1.3")
    assert not v({"decoding_type": "PARD", "max_draft_len": 3, "speculative_model": "d", "mask_token_id": 7}, "1.3")
