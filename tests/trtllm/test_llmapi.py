"""The llm-api flavour on the tensorrt-llm runtime, against the TensorRT-LLM test double: the repository NVIDIA
documents (tensorrt_llm/config.pbtxt + 1/model.yaml + NVIDIA's model.py/helpers.py copied at compile), model.yaml
accepted by the double's TorchLlmArgs for the release it is written for (tensorrt_llm/llmapi/llm_args.py), and the
version policy. Expected keys and spellings are upstream's (llm_args.py per release), written here by hand."""

from __future__ import annotations

import json
import os

import pytest
from trtllm_helpers import DOUBLES, compile_repository, double_validates

from specbuild.errors import RecipeError, UserError

RELEASES = ("1.0", "1.1", "1.2", "1.3")
NVIDIA_MODEL = DOUBLES / "triton_backend" / "all_models" / "llmapi" / "tensorrt_llm" / "1"
# decoding_type spelling and draft-checkpoint field per release (llm_args.py per release: 1.0/1.1
# and a 1.3.0rc3 tree parse through DecodingBaseConfig.from_dict, whose map knows DraftTarget and Eagle; 1.2 gets
# what both accept; the discriminated union after 1.3.0rc3 has Draft_Target and Eagle3)
SPELLING = {
    "1.0": ("Eagle", "DraftTarget", "speculative_model_dir"),
    "1.1": ("Eagle", "DraftTarget", "speculative_model_dir"),
    "1.2": ("Eagle", "DraftTarget", "speculative_model_dir"),
    "1.3": ("Eagle3", "Draft_Target", "speculative_model"),
}


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize("method", ["draft_target", "prompt_lookup", "eagle3", "mtp"])
def test_model_yaml_is_accepted_by_the_release_it_is_written_for(machine, llmapi_recipe, method, release):
    machine.set("SPECBUILD_DOUBLE_TRTLLM_VERSION", f"{release}.0")
    if (method, release) == ("eagle3", "1.0"):  # 1.0 has no eagle3_layers_to_capture (llm_args.py): check says so
        with pytest.raises(RecipeError, match="speculation.layers_to_capture: TensorRT-LLM 1.0 has no"):
            compile_repository(llmapi_recipe(method, release))
        return
    recipe, repo = compile_repository(llmapi_recipe(method, release))
    yaml_path = repo / "tensorrt_llm" / "1" / "model.yaml"
    from specbuild.repository.llmapi.model_yaml import load

    cfg = load(yaml_path.read_text())
    spec = cfg["speculative_config"]
    eagle_type, draft_type, model_field = SPELLING[release]
    expected_type = {"draft_target": draft_type, "prompt_lookup": "NGram", "eagle3": eagle_type, "mtp": "MTP"}[method]
    assert spec["decoding_type"] == expected_type
    if method in ("draft_target", "eagle3"):
        assert spec[model_field].endswith(f"models/{'draft' if method == 'draft_target' else 'eagle3'}")
        assert os.path.isabs(spec[model_field])
    if method == "prompt_lookup":  # ≤1.1 defaults max_matching_ngram_size to 0: it must be written (llm_args.py)
        assert spec["max_matching_ngram_size"] == 4 and spec["max_draft_len"] == 3
    assert cfg["triton_config"] == {"max_batch_size": 0, "decoupled": True, "cancellation_check_period_ms": 100}
    done = double_validates(yaml_path, release)
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize(
    "method, schedule",
    [("prompt_lookup", {1: 3, 2: 2, 4: 0}), ("draft_target", {1: 4, 3: 0}), ("eagle3", {1: 3, 4: 1})],
)
def test_the_adaptive_schedule_is_written_in_each_releases_spelling(machine, llmapi_recipe, method, schedule, release):
    """llm_args.py: draft_len_schedule, each key the largest batch size of its length after 1.2
    (PR #10860), max_concurrency (off above N) up to 1.2 (whether 1.2.x has draft_len_schedule is not known:
    specbuild.repository.llmapi.releases); one-model EAGLE-3 follows it after 1.2 only. What a release cannot say is a recipe
    finding naming the release."""
    machine.set("SPECBUILD_DOUBLE_TRTLLM_VERSION", f"{release}.0")
    path = llmapi_recipe(method, release, adaptive={"draft_len_schedule": schedule}, build={"max_batch_size": 8})
    if method == "eagle3" and release == "1.0":
        return  # refused for layers_to_capture (above)
    refused = (method == "eagle3" and release != "1.3") or (release in ("1.0", "1.1", "1.2") and len(schedule) > 2)
    if refused:
        with pytest.raises(RecipeError, match=r"adaptive.draft_len_schedule: TensorRT-LLM " + release):
            compile_repository(path)
        return
    _, repo = compile_repository(path)
    yaml_path = repo / "tensorrt_llm" / "1" / "model.yaml"
    from specbuild.repository.llmapi.model_yaml import load

    spec = load(yaml_path.read_text())["speculative_config"]
    want = {"1.0": {"max_concurrency": 2}, "1.1": {"max_concurrency": 2}, "1.2": {"max_concurrency": 2}, "1.3": None}[
        release
    ]
    if release == "1.3":  # upper bounds, exact up to max_batch_size 8; trailing zeros implicit
        want = {
            "draft_len_schedule": {"prompt_lookup": {1: 3, 3: 2}, "draft_target": {2: 4}, "eagle3": {3: 3, 8: 1}}[
                method
            ]
        }
    got = {k: spec[k] for k in ("max_concurrency", "draft_len_schedule") if k in spec}
    assert got == want
    done = double_validates(yaml_path, release)
    assert done.returncode == 0, done.stderr[-2000:]


def test_the_double_refuses_what_the_releases_refuse(machine, llmapi_recipe, tmp_path):
    """The double has teeth: the spellings of another release and unknown keys fail model load (llm_args.py), each
    with the message of its release's parse path (from_dict's ValueError, or the union's tag error)."""
    machine.set("SPECBUILD_DOUBLE_TRTLLM_VERSION", "1.2.0")
    _, repo = compile_repository(llmapi_recipe("draft_target", "1.2"))
    text = (repo / "tensorrt_llm" / "1" / "model.yaml").read_text()
    union = text.replace("DraftTarget", "Draft_Target").replace("speculative_model_dir", "speculative_model")
    cases = [
        ("1.2", text.replace("DraftTarget", "Draft_Target"), "Invalid decoding type: Draft_Target"),
        ("1.2", text.replace("max_num_tokens", "max_num_token"), "max_num_token: Extra inputs are not permitted"),
        (
            "1.2",
            text.replace("speculative_model_dir", "speculative_model"),
            "speculative_model: Extra inputs are not permitted",
        ),
        ("1.1", text.replace("DraftTarget", "Draft_Target"), "Invalid decoding type: Draft_Target"),
        ("1.0", text.replace("DraftTarget", "Eagle3"), "Invalid decoding type: Eagle3"),
        ("1.3.0rc3", union, "Invalid decoding type: Draft_Target"),
        ("1.3", text, "Input tag 'DraftTarget' found using 'decoding_type' does not match"),
    ]
    for i, (release, broken_text, message) in enumerate(cases):
        broken = tmp_path / f"broken-{i}.yaml"
        broken.write_text(broken_text)
        done = double_validates(broken, release)
        assert done.returncode != 0 and message in done.stderr, (release, message, done.stderr[-600:])
    accepted = tmp_path / "union.yaml"
    accepted.write_text(union)
    assert double_validates(accepted, "1.3").returncode == 0


def test_nvidia_files_are_copied_and_nothing_of_ours(machine, llmapi_recipe):
    machine.set("SPECBUILD_DOUBLE_TRTLLM_VERSION", "1.2.1")
    _, repo = compile_repository(llmapi_recipe("eagle3"))
    version_dir = repo / "tensorrt_llm" / "1"
    assert sorted(p.name for p in version_dir.iterdir()) == ["helpers.py", "model.py", "model.yaml"]
    for name in ("model.py", "helpers.py"):
        assert (version_dir / name).read_bytes() == (NVIDIA_MODEL / name).read_bytes()
    config = (repo / "tensorrt_llm" / "config.pbtxt").read_text()
    assert 'backend: "python"' in config and "max_batch_size" not in config  # 0 is protobuf's default
    assert "decoupled: true" in config
    script = (repo / "launch_triton.sh").read_text()
    assert '--model-repository="$REPO"' in script and "mpirun" not in script and "${" not in script


def test_installed_release_must_match_the_recipe(machine, llmapi_recipe):
    machine.set("SPECBUILD_DOUBLE_TRTLLM_VERSION", "1.1.0")
    with pytest.raises(
        UserError,
        match=r"llm_api.release is 1.2 but TensorRT-LLM 1.1.0 is installed.*"
        r'set llm_api.release: "1.1"',
    ):
        compile_repository(llmapi_recipe("draft_target", "1.2"))
    machine.set("SPECBUILD_DOUBLE_TRTLLM_VERSION", "0.21.0")
    with pytest.raises(UserError, match="needs 1.0 or newer"):
        compile_repository(llmapi_recipe("draft_target", "1.2"))


def test_baseline_has_no_speculative_config(machine, llmapi_recipe):
    machine.set("SPECBUILD_DOUBLE_TRTLLM_VERSION", "1.2.0")
    _, target = compile_repository(llmapi_recipe("eagle3"))
    _, baseline = compile_repository(llmapi_recipe("eagle3"), role="baseline")
    from specbuild.repository.llmapi.model_yaml import load

    t = load((target / "tensorrt_llm" / "1" / "model.yaml").read_text())
    b = load((baseline / "tensorrt_llm" / "1" / "model.yaml").read_text())
    assert "speculative_config" not in b and t.pop("speculative_config")
    assert t == b
    assert baseline.name.endswith("-baseline")


@pytest.mark.parametrize(
    "changes, field, words",
    [
        (
            {"speculation": {"method": "medusa", "checkpoint": "models/medusa", "num_heads": 3}},
            "speculation.method",
            "medusa is not in TensorRT-LLM's LLM API",
        ),
        ({"speculation": {"method": "lookahead"}}, "speculation.method", "lookahead is not in TensorRT-LLM's LLM API"),
        ({"build": {"pp_size": 2}, "triton": {"gpu_device_ids": [0, 1]}}, "build.pp_size", "pipeline parallelism"),
        ({"speculation": {"dynamic_tree": {"top_k": 2}}}, "speculation.dynamic_tree", "chain only"),
        ({"validation": {"sampling": {"trials": 10}}}, "validation.sampling", "reference runtime only"),
        (
            {"llm_api": {"instances": 2}, "triton": {"gpu_device_ids": [0, 1, 2]}},
            "triton.gpu_device_ids",
            "each of the 2",
        ),
    ],
)
def test_check_refuses_what_tensorrt_llm_refuses(machine, llmapi_recipe, changes, field, words):
    from specbuild.recipe import load_recipe

    path = llmapi_recipe("eagle3")
    data = json.loads(path.read_text())
    for key, value in changes.items():
        data[key] = {**data.get(key, {}), **value} if key != "speculation" or "method" not in value else value
    path.write_text(json.dumps(data))
    with pytest.raises(RecipeError) as info:
        load_recipe(path)
    assert any(p.field == field and words in p.message and p.line for p in info.value.problems), str(info.value)


def test_engine_flavour_refuses_the_llm_api_methods(machine, llmapi_recipe):
    from specbuild.recipe import load_recipe

    path = llmapi_recipe("eagle3")
    data = json.loads(path.read_text())
    data["flavour"] = "engine"
    path.write_text(json.dumps(data))
    with pytest.raises(RecipeError, match="eagle3 exists only in the llm-api flavour"):
        load_recipe(path)


def test_multi_instance_and_multi_node_launch(machine, llmapi_recipe):
    machine.set("SPECBUILD_DOUBLE_TRTLLM_VERSION", "1.2.0")
    _, repo = compile_repository(
        llmapi_recipe("draft_target", llm_api={"instances": 2}, triton={"gpu_device_ids": [0, 1]})
    )
    config = (repo / "tensorrt_llm" / "config.pbtxt").read_text()
    assert "count: 2" in config and 'string_value: "0;1"' in config  # ';' between instances (llmapi model.py@044a90d)
    assert "mpirun" not in (repo / "launch_triton.sh").read_text()
    _, repo = compile_repository(
        llmapi_recipe(
            "draft_target", llm_api={"nodes": 2}, build={"tp_size": 4}, triton={"gpu_device_ids": [0, 1, 2, 3]}
        )
    )
    script = (repo / "launch_triton.sh").read_text()
    assert 'exec "$TRTLLM_LLMAPI_LAUNCH" "$TRITONSERVER" --model-repository="$REPO"' in script


def test_doctor_checks_the_llmapi_flavour(machine, llmapi_recipe, capsys):
    from specbuild.cli import main

    machine.set("SPECBUILD_DOUBLE_TRTLLM_VERSION", "1.2.1")
    code = main(["doctor", "--recipe", str(llmapi_recipe("draft_target")), "--json"])
    report = json.loads(capsys.readouterr().out)
    checks = {c["name"]: c for c in report["checks"]}
    assert checks["llmapi model"]["status"] == "ok" and str(NVIDIA_MODEL) in checks["llmapi model"]["detail"]
    assert checks["TensorRT-LLM"]["status"] == "ok" and "1.2.1" in checks["TensorRT-LLM"]["detail"]
    assert "trtllm-build" not in checks  # an engine-flavour check
    machine.set("SPECBUILD_DOUBLE_TRTLLM_VERSION", "1.1.0")
    main(["doctor", "--recipe", str(llmapi_recipe("draft_target")), "--json"])
    checks = {c["name"]: c for c in json.loads(capsys.readouterr().out)["checks"]}
    assert checks["TensorRT-LLM"]["status"] == "fail" and 'llm_api.release: "1.1"' in checks["TensorRT-LLM"]["fix"]
    assert code in (0, 2)


@pytest.mark.timeout(300)
def test_the_gpu_repository_loads_in_a_real_tritonserver(machine, llmapi_recipe):
    """Triton accepts the config.pbtxt and the (double of) NVIDIA's model loads the model.yaml; a model.yaml the
    release refuses makes the model fail to load with that reason."""
    pytest.importorskip("tritonclient")
    from specbuild.serve import TritonServer

    machine.set("SPECBUILD_DOUBLE_TRTLLM_VERSION", "1.2.0")
    _, repo = compile_repository(llmapi_recipe("eagle3"))
    with TritonServer(repo, log_path=repo.parent / "tritonserver.log", exit_timeout_s=1) as server:
        import tritonclient.http as httpclient

        client = httpclient.InferenceServerClient(server.http_url.removeprefix("http://"))
        assert client.is_model_ready("tensorrt_llm")
        config = client.get_model_config("tensorrt_llm")
        assert config["model_transaction_policy"]["decoupled"] is True and config.get("max_batch_size", 0) == 0
    yaml_path = repo / "tensorrt_llm" / "1" / "model.yaml"
    # 1.2 parses through DecodingBaseConfig.from_dict: an unknown decoding_type stops model load with its message
    yaml_path.write_text(yaml_path.read_text().replace("decoding_type: Eagle", "decoding_type: Eagle4"))
    with pytest.raises(UserError, match="Invalid decoding type: Eagle4"):
        with TritonServer(repo, log_path=repo.parent / "tritonserver-broken.log"):
            pass
