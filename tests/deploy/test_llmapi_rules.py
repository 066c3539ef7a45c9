"""The deploy rules of the llm-api flavour (deploy_findings, run by `specbuild check`): llm_api.nodes against
deploy.gpus_per_node (one source of truth: a contradiction is a located finding), the GPUs of one instance and of
several, the image policy (TensorRT-LLM >= 1.0 of llm_api.release: containers 25.09+; the engine flavour's policy
is unchanged), the world layouts and the launch plans."""

from __future__ import annotations

import pytest
from deploy_helpers import make_recipe

from specbuild.deploy import images
from specbuild.deploy.checks import deploy_findings
from specbuild.deploy.context import bundle_flavour
from specbuild.deploy.launch import SLURM_EVERY_TASK, SLURM_ONE_TASK, script_ports
from specbuild.deploy.world import describe
from specbuild.recipe.checks import general_findings
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
    """The deploy rules' findings, and the recipe's own (the image's TensorRT-LLM against llm_api.release is the
    recipe's rule: specbuild.recipe.llm_release.findings)."""
    build = resolve_build(make_recipe(stem, changes))
    return {
        (".".join(map(str, f.path)), f.message, tuple(".".join(p) for p in f.also))
        for f in [*deploy_findings(build), *general_findings(build)]
    }


TP16 = {"build.tp_size": 16, "triton.gpu_device_ids": list(range(16))}


@pytest.mark.parametrize(
    "changes, field, words",
    [
        # the world spans nodes but the recipe says one: the launch script would not wrap tritonserver
        (TP16, "llm_api.nodes", "llm_api.nodes is 1 but tp_size * pp_size = 16 is more than a node's 8 GPUs"),
        (TP16, "llm_api.nodes", "set llm_api.nodes: 2"),
        # more ranks per node than a node has GPUs
        (
            {"build.tp_size": 32, "llm_api.nodes": 2, "triton.gpu_device_ids": list(range(32))},
            "llm_api.nodes",
            "puts 16 of the tp_size * pp_size = 32 ranks on each node, but a node has 8 GPUs",
        ),
        (
            {"build.tp_size": 32, "llm_api.nodes": 2, "triton.gpu_device_ids": list(range(32))},
            "llm_api.nodes",
            "set llm_api.nodes: 4",
        ),
        ({**TP16, "llm_api.nodes": 2, "deploy.gpus_per_node": 4}, "llm_api.nodes", "set llm_api.nodes: 4"),
        # one instance pins no GPU
        ({"build.tp_size": 2, "triton.gpu_device_ids": [1, 2]}, "triton.gpu_device_ids", "list [0, 1]"),
        ({"triton.gpu_device_ids": [3]}, "triton.gpu_device_ids", "pins no GPU"),
        # several instances share one pod within a node
        (
            {"build.tp_size": 2, "llm_api.instances": 2, "triton.gpu_device_ids": [0, 1, 8, 9]},
            "triton.gpu_device_ids",
            "names GPU 9 but a node has 8",
        ),
        # Kubernetes for a LeaderWorkerSet
        (
            {**TP16, "llm_api.nodes": 2, "deploy.kubernetes": {"version": "1.25"}},
            "deploy.kubernetes.version",
            "LeaderWorkerSet",
        ),
        # the image: TensorRT-LLM >= 1.0 of llm_api.release
        (
            {"deploy.image": {"tag": "25.08-trtllm-python-py3"}},
            "deploy.image.tag",
            "TensorRT-LLM 0.21.0 predates the llm-api flavour, which needs 1.0 or newer",
        ),
        (
            {"deploy.image": {"tag": "26.02-trtllm-python-py3"}},
            "deploy.image.tag",
            "ships TensorRT-LLM 1.1.0 but llm_api.release is 1.2",
        ),
        ({"deploy.image": {"tag": "26.07-py3"}}, "deploy.image.tag", "carry the TensorRT-LLM backend"),
        (
            {"deploy.image": {"trtllm_version": "0.20.0"}},
            "deploy.image.trtllm_version",
            "TensorRT-LLM 0.20.0 predates the llm-api flavour, which needs 1.0 or newer",
        ),
        ({"deploy.image": {"trtllm_version": "1.1.0"}}, "deploy.image.trtllm_version", "but llm_api.release is 1.2"),
    ],
)
def test_llmapi_deploy_findings_name_the_field(changes, field, words):
    found = findings("llmapi_eagle3", changes)
    assert any(f == field and words in m for f, m, _ in found), found


def test_a_version_no_ngc_container_ships_renders_and_its_bundle_needs_an_image_tag():
    """Issue #40: a TensorRT-LLM past the NGC table (a source build, a newer pip wheel) is not refused: the
    repository renders; the bundle needs deploy.image.tag (no NGC tag is invented), and plan / compile say why."""
    from specbuild.deploy.bundle import applies

    changes = {"deploy.image": {"trtllm_version": "1.2.7"}}
    assert not [f for f in findings("llmapi_eagle3", changes) if f[0].startswith("deploy.image")]
    recipe = make_recipe("llmapi_eagle3", changes)
    why = applies(recipe, resolve_build(recipe).runtime)
    assert why is not None and "TensorRT-LLM 1.2.7" in why and "deploy.image.tag" in why, why
    tagged = make_recipe(
        "llmapi_eagle3", {"deploy.image": {"trtllm_version": "1.2.7", "repository": "my/trtllm", "tag": "custom"}}
    )
    assert applies(tagged, resolve_build(tagged).runtime) is None


def test_the_node_finding_names_every_field_it_reads():
    found = findings("llmapi_eagle3", TP16)
    also = next(a for f, _, a in found if f == "llm_api.nodes")
    assert set(also) == {"deploy.gpus_per_node", "build.tp_size", "build.pp_size"}


@pytest.mark.parametrize(
    "changes",
    [
        {**TP16, "llm_api.nodes": 2},  # 2 nodes of 8
        {"build.tp_size": 8, "llm_api.nodes": 2, "deploy.gpus_per_node": 4, "triton.gpu_device_ids": list(range(8))},
        {"build.tp_size": 8, "llm_api.nodes": 2, "triton.gpu_device_ids": list(range(8))},  # 4 of a node's 8 GPUs
        {"build.tp_size": 2, "llm_api.instances": 2, "triton.gpu_device_ids": [0, 1]},  # two instances share GPUs 0,1
        {
            "deploy.image": {"repository": "registry.example/triton-trtllm", "tag": "1.3"},
            "llm_api.release": "1.3",
            "speculation.layers_to_capture": None,
        },  # an own image: specbuild cannot map it, and does not refuse it
    ],
)
def test_consistent_llmapi_layouts_have_no_findings(changes):
    recipe = make_recipe("llmapi_eagle3", changes)
    assert list(deploy_findings(resolve_build(recipe))) == []


def test_the_general_rules_accept_the_multi_node_layout():
    recipe = make_recipe("llmapi_eagle3", {**TP16, "llm_api.nodes": 2})
    assert list(general_findings(resolve_build(recipe))) == []


def test_a_release_no_container_ships_gets_no_bundle_unless_an_image_is_named(tmp_path):
    from deploy_helpers import layout_in

    from specbuild.deploy.bundle import applies, bundle_plan, write_bundle

    recipe = make_recipe("llmapi_eagle3", {"llm_api.release": "1.3"})
    why = applies(recipe, resolve_build(recipe).runtime)
    assert why.startswith(
        "no NGC tritonserver container ships TensorRT-LLM 1.3 (llm_api.release) yet (those that "
        "do: 1.0, 1.1, 1.2) — set deploy.image.repository and deploy.image.tag"
    )
    assert (
        list(deploy_findings(resolve_build(recipe))) == [] and list(general_findings(resolve_build(recipe))) == []
    )  # compile still works
    assert bundle_plan(resolve_build(recipe), layout_in(tmp_path, recipe)) == {"bundle": f"none: {why}"}
    assert write_bundle(resolve_build(recipe), layout_in(tmp_path, recipe)) is None
    own = make_recipe(
        "llmapi_eagle3",
        {"llm_api.release": "1.3", "deploy.image": {"repository": "registry.example/trtllm", "tag": "1.3.0"}},
    )
    assert (
        applies(own, resolve_build(own).runtime) is None
        and choose_image(own).reference == "registry.example/trtllm:1.3.0"
    )


def test_llmapi_image_policy():
    assert images.llmapi_releases() == ["1.0", "1.1", "1.2"]
    assert choose_image(make_recipe("llmapi_eagle3")).tag == "26.07-trtllm-python-py3"
    r10 = make_recipe("llmapi_eagle3", {"llm_api.release": "1.0", "speculation.layers_to_capture": None})
    assert choose_image(r10).tag == "25.11-trtllm-python-py3"  # 1.0.3.2510, the newest 1.0 container
    # the installed TensorRT-LLM (compile checked it is llm_api.release) picks the tag; one no container ships
    # (a nightly of the release) falls back to the release's newest container
    assert choose_image(make_recipe("llmapi_eagle3"), trtllm_version="1.2.0").tag == "26.03-trtllm-python-py3"
    assert choose_image(make_recipe("llmapi_eagle3"), trtllm_version="1.2.2rc1").tag == "26.07-trtllm-python-py3"
    r = make_recipe("llmapi_eagle3", {"deploy.image": {"trtllm_version": "1.2.0"}})
    assert choose_image(r).reference == "nvcr.io/nvidia/tritonserver:26.03-trtllm-python-py3"
    with pytest.raises(ValueError, match="no NGC tritonserver image ships TensorRT-LLM 1.3"):
        choose_image(make_recipe("llmapi_eagle3", {"llm_api.release": "1.3"}))
    # the engine flavour's policy stays: the newest engine-path release, 0.17 .. 1.3.0rc20
    assert choose_image(make_recipe("none")).tag == "26.07-trtllm-python-py3"
    assert (
        choose_image(make_recipe("none", {"deploy.image": {"trtllm_version": "0.20.0"}})).tag
        == "25.07-trtllm-python-py3"
    )
    assert any(
        f == "deploy.image.trtllm_version" and "0.17 <= version" in m
        for f, m, _ in findings("none", {"deploy.image": {"trtllm_version": "0.9.0"}})
    )


def test_world_layouts(tmp_path):
    w = _world(make_recipe("llmapi_tp2"))
    assert (w.mode, w.world_size, w.nodes, w.gpus_per_pod, w.multi_node) == ("single", 2, 1, 2, False)
    w = _world(make_recipe("llmapi_eagle3", {**TP16, "llm_api.nodes": 2}))
    assert (w.mode, w.world_size, w.nodes, w.gpus_per_pod, w.ranks_per_node) == ("multi-node", 16, 2, 8, 8)
    assert [(r.rank, r.node, r.gpu) for r in w.ranks] == [(r, r // 8, r % 8) for r in range(16)]
    w = _world(
        make_recipe("llmapi_eagle3", {"build.tp_size": 8, "llm_api.nodes": 2, "triton.gpu_device_ids": list(range(8))})
    )
    assert (w.nodes, w.gpus_per_pod) == (2, 4)  # llm_api.nodes decides, gpus_per_node (8) only bounds it
    w = _world(make_recipe("llmapi_tp2", {"llm_api.instances": 2, "triton.gpu_device_ids": [0, 1, 2, 3]}))
    assert (w.mode, w.nodes, w.gpus_per_pod, w.multi_node) == ("multi-instance", 1, 4, False)
    assert describe(w) == {
        "node 0": "one tritonserver, 2 instances of tensorrt_llm (no MPI)",
        "instance 0": "GPUs 0,1 (tp*pp = 2)",
        "instance 1": "GPUs 2,3 (tp*pp = 2)",
    }


def test_launch_plans(tmp_path):
    from specbuild.repository.llmapi.launch import launch_script

    repo = tmp_path / "repo"
    single = make_recipe("llmapi_tp2")
    plan = flavour_of(single).launch(single, resolve_build(single).spec, repo)
    assert plan.container_argv == ["bash", str(repo / "launch_triton.sh"), "--exit-timeout-secs=30"]
    assert plan.script_text == launch_script(single) and plan.slurm == SLURM_ONE_TASK
    assert plan.leader_command == plan.container_argv and plan.ports == {
        "HTTP_PORT": 8000,
        "GRPC_PORT": 8001,
        "METRICS_PORT": 8002,
    }
    multi = make_recipe("llmapi_eagle3", {**TP16, "llm_api.nodes": 2, "triton.http_port": 9000})
    plan = flavour_of(multi).launch(multi, resolve_build(multi).spec, repo)
    assert plan.slurm == SLURM_EVERY_TASK and plan.container_argv == [
        "bash",
        str(repo / "launch_triton.sh"),
        "--exit-timeout-secs=30",
    ]
    assert plan.leader_command == [
        "mpirun",
        "--allow-run-as-root",
        "-np",
        "16",
        "--map-by",
        "ppr:8:node",
        *plan.container_argv,
    ]
    assert len(plan.rank_argv) == 16 and all(argv == plan.container_argv for argv in plan.rank_argv)
    assert script_ports(plan.script_text)["HTTP_PORT"] == 9000
