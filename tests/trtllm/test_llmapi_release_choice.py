"""Which TensorRT-LLM release line the llm-api flavour writes model.yaml for (issue #40 item 1): taken from where the
repository will run, in this order: deploy.image.tag (an NGC tag's TensorRT-LLM, from the table specbuild keeps),
deploy.image.trtllm_version, the installed TensorRT-LLM, llm_api.release, else the newest stable with a note naming
what 1.3 and later need. Sources that disagree are refused; check, plan and the provenance say which and why.

What is expected is written here from the issue and the llmapi sheet (../shared/reference/trtllm-llmapi-newest.md),
not computed with specbuild's own table."""

from __future__ import annotations

import json

import pytest

from specbuild.errors import RecipeError, UserError


def unwritten(llmapi_recipe, method: str = "draft_target", **sections):
    """An llm-api recipe whose llm_api.release is not written (the other sections as given)."""
    path = llmapi_recipe(method, "1.2", **sections)
    data = json.loads(path.read_text())
    data["llm_api"].pop("release")
    path.write_text(json.dumps(data))
    return path


def loaded(path):
    from specbuild.recipe import load_recipe

    return load_recipe(path, check_files=False)


def on_reference(path):
    """The same recipe on the reference runtime (no installed TensorRT-LLM counts there)."""
    data = json.loads(path.read_text())
    data["runtime"] = "reference"
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize(
    ("image", "line", "why"),
    [
        (
            {"tag": "26.02-trtllm-python-py3"},
            "1.1",
            "deploy.image.tag 26.02-trtllm-python-py3 ships TensorRT-LLM 1.1.0",
        ),
        ({"tag": "25.10-trtllm-python-py3"}, "1.0", "ships TensorRT-LLM 1.0.0"),
        ({"trtllm_version": "1.3.0rc9"}, "1.3", "deploy.image.trtllm_version 1.3.0rc9"),
        ({"trtllm_version": "1.1.0"}, "1.1", "deploy.image.trtllm_version 1.1.0"),
    ],
)
def test_the_release_follows_the_deployment_image(machine, llmapi_recipe, image, line, why):
    recipe = loaded(on_reference(unwritten(llmapi_recipe, deploy={"image": image})))
    assert recipe.llm_api.release == line
    assert why in recipe.llm_release.why, recipe.llm_release


def test_the_image_tag_comes_before_the_version_and_a_disagreement_is_refused(machine, llmapi_recipe):
    image = {"tag": "26.03-trtllm-python-py3", "trtllm_version": "1.2.0"}
    recipe = loaded(on_reference(unwritten(llmapi_recipe, deploy={"image": image})))
    assert recipe.llm_api.release == "1.2" and recipe.llm_release.source == "deploy.image.tag"
    image = {"tag": "26.02-trtllm-python-py3", "trtllm_version": "1.2.0"}
    with pytest.raises(RecipeError, match="26.02-trtllm-python-py3"):
        loaded(on_reference(unwritten(llmapi_recipe, deploy={"image": image})))


@pytest.mark.parametrize(
    ("image", "field"),
    [
        ({"tag": "26.02-trtllm-python-py3"}, "deploy.image.tag"),  # 1.1.0 inside
        ({"trtllm_version": "1.3.0rc9"}, "deploy.image.trtllm_version"),
    ],
)
def test_a_written_release_that_disagrees_with_the_image_is_refused(machine, llmapi_recipe, image, field):
    path = on_reference(llmapi_recipe("draft_target", "1.2", deploy={"image": image}))
    with pytest.raises(RecipeError) as e:
        loaded(path)
    assert field in str(e.value) and "llm_api.release is 1.2" in str(e.value), e.value


def test_the_installed_tensorrt_llm_gives_the_release_when_nothing_else_names_it(machine, llmapi_recipe):
    machine.set("SPECBUILD_DOUBLE_TRTLLM_VERSION", "1.3.0rc12")
    recipe = loaded(unwritten(llmapi_recipe))
    assert recipe.llm_api.release == "1.3" and recipe.llm_release.source == "installed"
    assert "the TensorRT-LLM installed here is 1.3.0rc12" in recipe.llm_release.why
    machine.set("SPECBUILD_DOUBLE_TRTLLM_VERSION", "1.1.0")
    assert loaded(unwritten(llmapi_recipe)).llm_api.release == "1.1"


def test_a_written_release_other_than_the_installed_one_is_refused_at_compile(machine):
    from specbuild.trtllm.version import require_llmapi

    machine.set("SPECBUILD_DOUBLE_TRTLLM_VERSION", "1.3.0rc12")
    with pytest.raises(UserError, match='llm_api.release is 1.2 but TensorRT-LLM 1.3.0rc12 is installed.*"1.3"'):
        require_llmapi("1.2")
    assert require_llmapi("1.3").version == "1.3.0rc12"


def test_without_any_source_the_newest_stable_is_taken_with_a_note_on_1_3(llmapi_recipe, machine, capsys):
    from specbuild.cli import main

    path = on_reference(unwritten(llmapi_recipe))
    recipe = loaded(path)
    # the newest stable line an NGC container ships (26.03-26.07: 1.2.x)
    assert recipe.llm_api.release == "1.2" and recipe.llm_release.source == "default"
    assert main(["check", str(path)]) == 0
    out = capsys.readouterr().out
    assert "note: llm_api.release 1.2: nothing names where the repository will run" in out, out
    for need in ("Draft_Target", "max_draft_len for MTP", "one-model EAGLE-3 only", 'llm_api.release: "1.3"'):
        assert need in out, need
    # the default writes what 1.2 accepts: DraftTarget (the 1.3 line's Draft_Target fails there at model load)
    from specbuild.methods import describe
    from specbuild.repository.llmapi.model_yaml import model_yaml

    assert model_yaml(recipe, describe(recipe), role="target")["speculative_config"]["decoding_type"] == "DraftTarget"


def test_a_written_release_is_said_as_such(machine, llmapi_recipe):
    recipe = loaded(on_reference(llmapi_recipe("draft_target", "1.3")))
    assert recipe.llm_api.release == "1.3" and recipe.llm_release.why == "written in the recipe"


def test_a_version_before_the_1_3_line_is_refused_with_the_reason(machine, llmapi_recipe):
    path = on_reference(unwritten(llmapi_recipe, deploy={"image": {"trtllm_version": "1.3.0rc5"}}))
    with pytest.raises(RecipeError) as e:
        loaded(path)
    said = str(e.value)
    assert "deploy.image.trtllm_version" in said and "1.3.0rc7 and later" in said, said


def test_a_version_newer_than_any_source_read_renders_with_a_note(machine, llmapi_recipe, capsys):
    from specbuild.cli import main

    path = on_reference(unwritten(llmapi_recipe, deploy={"image": {"trtllm_version": "1.3.0rc41"}}))
    assert loaded(path).llm_api.release == "1.3"
    assert main(["check", str(path)]) == 0
    out = capsys.readouterr().out
    assert "TensorRT-LLM 1.3.0rc41 is newer than any source specbuild read" in out, out


def test_compile_says_why_it_writes_no_bundle_for_a_version_no_container_ships(
    machine, llmapi_recipe, tmp_path, capsys
):
    """1.3.0rc41 installed and named: the repository is written, the bundle is not (no NGC tag is invented), and
    compile says so and what to set."""
    from specbuild.cli import main

    machine.set("SPECBUILD_DOUBLE_TRTLLM_VERSION", "1.3.0rc41")
    path = unwritten(llmapi_recipe, deploy={"image": {"trtllm_version": "1.3.0rc41"}})
    code = main(["compile", str(path), "--no-validate", "--repo-dir", str(tmp_path / "triton_repo")])
    captured = capsys.readouterr()
    said = " ".join((captured.out + captured.err).split())  # the console folds long lines at its width
    assert code == 0, said
    assert (tmp_path / "triton_repo" / "llmapi-draft-target" / "tensorrt_llm" / "1" / "model.yaml").is_file()
    assert "no deployment bundle: no NGC tritonserver container ships TensorRT-LLM 1.3.0rc41" in said, said
    assert "deploy.image.tag" in said
    model_yaml = (tmp_path / "triton_repo" / "llmapi-draft-target" / "tensorrt_llm" / "1" / "model.yaml").read_text()
    assert "decoding_type: Draft_Target" in model_yaml, model_yaml


def test_plan_and_provenance_say_which_release_and_why(machine, llmapi_recipe, capsys):
    from specbuild.cache.provenance import versions
    from specbuild.cli import main

    path = on_reference(unwritten(llmapi_recipe, deploy={"image": {"tag": "26.02-trtllm-python-py3"}}))
    assert main(["plan", str(path)]) == 0
    out = capsys.readouterr().out
    assert "TensorRT-LLM release: 1.1 (deploy.image.tag 26.02-trtllm-python-py3 ships TensorRT-LLM 1.1.0)" in out
    said = versions(loaded(path))["llm_api_release"]
    assert said == "1.1 (deploy.image.tag 26.02-trtllm-python-py3 ships TensorRT-LLM 1.1.0)"


def test_the_report_names_the_release_line():
    from specbuild.validate.report.markdown import _release_line

    d = {"build": {"versions": {"llm_api_release": "1.3 (deploy.image.trtllm_version 1.3.0rc9)"}}}
    assert _release_line(d) == ["- model.yaml written for TensorRT-LLM 1.3 (deploy.image.trtllm_version 1.3.0rc9)"]
    assert _release_line({"build": {"versions": {}}}) == []
    ran = {"build": {"versions": {}, "runs": "AUTO runs NGram: 5 drafts"}}
    assert _release_line(ran) == ["- what ran: AUTO runs NGram: 5 drafts"]


def test_auto_names_what_runs_in_its_place_and_other_methods_do_not(machine, llmapi_recipe):
    from specbuild.methods import describe, pack_for

    path = on_reference(llmapi_recipe("draft_target", "1.3"))
    data = json.loads(path.read_text())
    data["speculation"] = {"method": "auto"}
    path.write_text(json.dumps(data))
    auto = describe(loaded(path))
    said = pack_for(auto).runs(auto)
    assert said is not None and said.startswith("AUTO runs NGram") and "max_batch_size" in said, said
    other = describe(loaded(on_reference(llmapi_recipe("draft_target", "1.3"))))
    assert pack_for(other).runs(other) is None


def test_the_1_3_line_rules(machine, llmapi_recipe):
    """1.3 (llm_args.py@0004396): Draft_Target; MTP's length as max_draft_len (num_nextn_predict_layers is
    deprecated); one-model EAGLE-3 only: eagle3_one_model is never written false (nor at all: absent from 1.3.0rc27)."""
    from specbuild.methods import describe
    from specbuild.repository.llmapi.model_yaml import model_yaml

    def spec(method, **sections):
        recipe = loaded(
            on_reference(unwritten(llmapi_recipe, method, deploy={"image": {"trtllm_version": "1.3.0rc9"}}))
        )
        return model_yaml(recipe, describe(recipe), role="target")["speculative_config"]

    assert spec("draft_target")["decoding_type"] == "Draft_Target"
    mtp = spec("mtp")
    assert mtp["decoding_type"] == "MTP" and "max_draft_len" in mtp and "num_nextn_predict_layers" not in mtp, mtp
    eagle3 = spec("eagle3")
    assert eagle3["decoding_type"] == "Eagle3" and eagle3.get("eagle3_one_model", True) is True, eagle3
    assert "eagle3_one_model" not in eagle3
