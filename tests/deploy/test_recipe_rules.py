"""The deploy section's recipe rules (deploy_findings, wired into `specbuild check`), the world layout, the
image-tag policy and the reading of the repository's launch script."""

from __future__ import annotations

import pytest
from deploy_helpers import all_recipes, make_recipe

from specbuild.deploy import images
from specbuild.deploy.checks import deploy_findings
from specbuild.deploy.context import bundle_flavour
from specbuild.deploy.launch import ScriptFormatError, parse_script
from specbuild.methods import describe
from specbuild.recipe.deploy import expected_gpu_id_count
from specbuild.repository.engine.launch import launch_script
from specbuild.runtimes.build import resolve_build


def flavour_of(recipe):
    """The bundle's part of the recipe's flavour, as a command resolves it."""
    return bundle_flavour(resolve_build(recipe).runtime)


def choose_image(recipe, trtllm_version=None):
    return flavour_of(recipe).image(recipe, trtllm_version)


def _world(recipe):
    """The recipe's world, laid out with its speculation (specbuild.runtimes.build)."""
    return flavour_of(recipe).world(recipe, resolve_build(recipe).spec)


def findings(stem, changes):
    return {(".".join(map(str, f.path)), f.message) for f in deploy_findings(resolve_build(make_recipe(stem, changes)))}


@pytest.mark.parametrize("name", sorted(all_recipes()))
def test_shipped_recipes_and_variants_have_no_findings(name):
    assert list(deploy_findings(resolve_build(all_recipes()[name]))) == []


MULTI = {"build.tp_size": 8, "build.pp_size": 2}


@pytest.mark.parametrize(
    "changes, field, words",
    [
        ({**MULTI, "triton.gpu_device_ids": list(range(16))}, "triton.gpu_device_ids", "list one node's GPUs"),
        (
            {**MULTI, "triton.gpu_device_ids": [0, 1, 2, 3, 4, 5, 6, 8]},
            "triton.gpu_device_ids",
            "[0, 1, 2, 3, 4, 5, 6, 7]",
        ),
        ({**MULTI, "deploy.gpus_per_node": 6}, "deploy.gpus_per_node", "not a multiple"),
        ({"triton.gpu_device_ids": [9]}, "triton.gpu_device_ids", "names GPU 9 but a node has 8"),
        (
            {**MULTI, "triton.gpu_device_ids": list(range(8)), "deploy.kubernetes": {"version": "1.25"}},
            "deploy.kubernetes.version",
            "LeaderWorkerSet",
        ),
        ({"deploy.image": {"tag": "26.07-py3"}}, "deploy.image.tag", "carry the TensorRT-LLM backend"),
        ({"deploy.image": {"tag": "27.01-trtllm-python-py3"}}, "deploy.image.tag", "does not know"),
        ({"deploy.image": {"tag": "24.12-trtllm-python-py3"}}, "deploy.image.tag", "ships TensorRT-LLM 0.16.0"),
        (
            {"deploy.image": {"tag": "26.07-trtllm-python-py3", "trtllm_version": "1.1.0"}},
            "deploy.image.tag",
            "engines load only in the release that built them",
        ),
        ({"deploy.image": {"trtllm_version": "1.3.0"}}, "deploy.image.trtllm_version", "0.17 <= version <= 1.3.0rc20"),
        ({"deploy.autoscaling": {"min_replicas": 5, "max_replicas": 2}}, "deploy.autoscaling.min_replicas", "above"),
        ({"deploy.shm_size": "64Gi"}, "deploy.shm_size", "memory is 32Gi"),
        (
            {"deploy.kubernetes": {"termination_grace_period_s": 30}},
            "deploy.kubernetes.termination_grace_period_s",
            "SIGKILL",
        ),
    ],
)
def test_deploy_findings_name_the_field(changes, field, words):
    found = findings("none", changes)
    assert any(f == field and words in m for f, m in found), found


def test_draft_target_must_fit_one_node():
    found = findings(
        "draft_target",
        {"build.tp_size": 16, "triton.gpu_device_ids": list(range(16)), "triton.draft_gpu_device_ids": [0]},
    )
    assert any(f == "deploy.gpus_per_node" and "orchestrator mode" in m for f, m in found), found
    found = findings("draft_target", {"triton.draft_gpu_device_ids": [8]})
    assert any(f == "triton.draft_gpu_device_ids" and "share one pod" in m for f, m in found), found


def test_gpu_id_count_the_general_rule_must_use():
    one_node = make_recipe("none", {"build.tp_size": 4})
    two_nodes = make_recipe("none", {**MULTI, "triton.gpu_device_ids": list(range(8))})
    assert expected_gpu_id_count(one_node, describe(one_node)) == 4
    assert expected_gpu_id_count(two_nodes, describe(two_nodes)) == 8


def test_world_layout_across_nodes():
    w = _world(make_recipe("none", {**MULTI, "triton.gpu_device_ids": list(range(8))}))
    assert (w.mode, w.world_size, w.nodes, w.gpus_per_pod, w.ranks_per_node) == ("leader", 16, 2, 8, 8)
    assert [(r.rank, r.node, r.gpu) for r in w.ranks] == [(r, r // 8, r % 8) for r in range(16)]


def test_world_layout_of_draft_target():
    w = _world(
        make_recipe(
            "draft_target", {"build.tp_size": 2, "triton.gpu_device_ids": [1, 2], "triton.draft_gpu_device_ids": [0]}
        )
    )
    assert (w.mode, w.world_size, w.gpus_per_pod, w.spawn) == ("orchestrator", 1, 3, True)
    fast = _world(
        make_recipe(
            "draft_target",
            {
                "build.tp_size": 2,
                "speculation.use_draft_logits": True,
                "speculation.fast_logits": True,
                "triton.gpu_device_ids": [1, 2],
                "triton.draft_gpu_device_ids": [0],
            },
        )
    )
    assert [(r.rank, r.gpu) for r in fast.ranks] == [(0, None), (1, 0), (2, 1), (3, 2)]
    assert not fast.spawn and fast.world_size == 4


def test_image_tag_policy():
    assert images.newest_supported() == "1.2.1"
    assert images.tag_for("1.2.1") == "26.07-trtllm-python-py3"
    assert images.tag_for("0.17.0.post1") == "25.02-trtllm-python-py3"
    assert images.tag_for("1.2.7") is None
    assert images.trtllm_of_tag("25.10-trtllm-python-py3") == "1.0.0"
    r = make_recipe("none", {"deploy.image": {"trtllm_version": "0.20.0"}})
    assert choose_image(r).reference == "nvcr.io/nvidia/tritonserver:25.07-trtllm-python-py3"
    # the TensorRT-LLM that built the engines picks the tag when the recipe names none
    assert choose_image(make_recipe("none"), trtllm_version="1.1.0").tag == "26.02-trtllm-python-py3"


def test_rank_commands_are_the_scripts_app_contexts(tmp_path):
    recipe = make_recipe("none", {"build.tp_size": 2, "triton.gpu_device_ids": [0, 1]})
    text = launch_script(recipe, describe(recipe), "target")
    parts = parse_script(text)
    assert parts.ports == {"HTTP_PORT": 8000, "GRPC_PORT": 8001, "METRICS_PORT": 8002}
    plan = flavour_of(recipe).launch(recipe, resolve_build(recipe).spec, tmp_path / "repo")
    assert plan.container_argv == ["bash", str(tmp_path / "repo" / "launch_triton.sh"), "--exit-timeout-secs=30"]
    assert plan.rank_argv[0][:2] == ["/opt/tritonserver/bin/tritonserver", f"--model-repository={tmp_path / 'repo'}"]
    assert plan.rank_argv[0][-1] == "--exit-timeout-secs=30"  # "$@" goes to rank 0 only
    assert "--model-control-mode=explicit" in plan.rank_argv[1] and "--load-model=tensorrt_llm" in plan.rank_argv[1]
    with pytest.raises(ScriptFormatError):
        parse_script(text.replace("exec mpirun --allow-run-as-root", "exec mpiexec"))
