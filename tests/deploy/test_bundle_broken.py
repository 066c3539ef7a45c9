"""A deliberately broken bundle fails validation, with the file and field named: an unknown field (core object,
LeaderWorkerSet template, CRD object), a mismatched world size, a wrong port, a command that is not the
repository's launch command, a probe path Triton does not serve, a Slurm rank that differs from the script's."""

from __future__ import annotations

import shutil

import pytest
from deploy_helpers import compile_layout, make_recipe

from specbuild.deploy.bundle import write_bundle
from specbuild.deploy.bundle_check import check_bundle, validate_bundle
from specbuild.deploy.yamlio import dump_all, load_all
from specbuild.errors import UserError
from specbuild.runtimes.build import resolve_build


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    recipe = make_recipe("none")
    layout = compile_layout(tmp_path_factory.mktemp("single"), recipe)
    return recipe, layout, write_bundle(resolve_build(recipe), layout, validate=True)


@pytest.fixture(scope="module")
def multi(tmp_path_factory):
    recipe = make_recipe(
        "none", {"name": "trt-tp8-pp2", "build.tp_size": 8, "build.pp_size": 2, "triton.gpu_device_ids": list(range(8))}
    )
    layout = compile_layout(tmp_path_factory.mktemp("multi"), recipe)
    return recipe, layout, write_bundle(resolve_build(recipe), layout, validate=True)


def broken(bundle, tmp_path, file, change, doc=0):
    recipe, layout, folder = bundle
    copy = tmp_path / "bundle"
    shutil.copytree(folder, copy)
    docs = load_all((copy / file).read_text())
    change(docs[doc])
    (copy / file).write_text(dump_all(docs))
    return [str(f) for f in validate_bundle(copy, resolve_build(recipe), layout, schemas=True, bundle_folder=folder)]


def container(deployment):
    return deployment["spec"]["template"]["spec"]["containers"][0]


def leader(lws):
    return lws["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["containers"][0]


def test_unknown_field_in_a_deployment(single, tmp_path):
    found = broken(single, tmp_path, "deployment.yaml", lambda d: d["spec"]["template"]["spec"].update(hostIPCs=True))
    assert any(
        "deployment.yaml: spec.template.spec:" in f and "'hostIPCs' was unexpected" in f and "strict" in f
        for f in found
    ), found


def test_unknown_field_in_a_leader_worker_set_template(multi, tmp_path):
    found = broken(
        multi,
        tmp_path,
        "leaderworkerset.yaml",
        lambda d: d["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0].update(gpus=8),
    )
    assert any(
        "spec.leaderWorkerTemplate.workerTemplate.spec.containers[0]" in f and "'gpus' was unexpected" in f
        for f in found
    ), found


def test_unknown_field_in_a_pod_monitor(single, tmp_path):
    found = broken(single, tmp_path, "podmonitor.yaml", lambda d: d["spec"].update(endpoints=[]))
    assert any("podmonitor.yaml: spec:" in f and "'endpoints' was unexpected" in f and "CRD" in f for f in found)


def test_bad_value_in_a_prometheus_rule(single, tmp_path):
    found = broken(single, tmp_path, "prometheusrule.yaml", lambda d: d["spec"]["groups"][0].update(interval="6 s"))
    assert any("spec.groups[0].interval" in f for f in found), found


def test_mismatched_world_size_across_nodes(multi, tmp_path):
    found = broken(multi, tmp_path, "leaderworkerset.yaml", lambda d: d["spec"]["leaderWorkerTemplate"].update(size=3))
    assert any(
        "spec.leaderWorkerTemplate.size" in f and "tp*pp = 8*2 = 16" in f and "3 pod(s) x 8" in f for f in found
    ), found


def test_mismatched_gpus_per_pod(single, tmp_path):
    def two_gpus(d):
        res = container(d)["resources"]
        res["limits"]["nvidia.com/gpu"] = res["requests"]["nvidia.com/gpu"] = 2

    found = broken(single, tmp_path, "deployment.yaml", two_gpus)
    assert any("resources.limits.nvidia.com/gpu" in f and "2 GPU(s) per pod" in f for f in found), found


def test_wrong_container_port(single, tmp_path):
    found = broken(single, tmp_path, "deployment.yaml", lambda d: container(d)["ports"][1].update(containerPort=9001))
    assert any("containers[0].ports[1].containerPort" in f and "serves grpc on 8001" in f for f in found), found


def test_wrong_service_port(multi, tmp_path):
    found = broken(multi, tmp_path, "service.yaml", lambda d: d["spec"]["ports"][0].update(port=80))
    assert any("service.yaml: spec.ports[0]" in f for f in found), found


def test_command_that_is_not_the_launch_command(single, tmp_path):
    found = broken(
        single,
        tmp_path,
        "deployment.yaml",
        lambda d: container(d).update(command=["python3", "/app/scripts/launch_triton_server.py"]),
    )
    assert any("containers[0].command" in f and "is not the repository's launch command" in f for f in found)


def test_leader_that_does_not_exec_the_launch_command(multi, tmp_path):
    found = broken(
        multi,
        tmp_path,
        "leaderworkerset.yaml",
        lambda d: leader(d).update(command=["bash", "-c", leader(d)["command"][2].replace("exec bash", "bash")]),
    )
    assert any("must end by exec-ing the repository's launch command" in f for f in found), found


def test_probe_on_a_path_triton_does_not_serve(single, tmp_path):
    found = broken(
        single, tmp_path, "deployment.yaml", lambda d: container(d)["livenessProbe"]["httpGet"].update(path="/healthz")
    )
    assert any("livenessProbe.httpGet.path" in f and "/v2/health/live" in f for f in found), found


def test_missing_dev_shm(single, tmp_path):
    found = broken(
        single,
        tmp_path,
        "deployment.yaml",
        lambda d: container(d).update(volumeMounts=container(d)["volumeMounts"][1:]),
    )
    assert any("no /dev/shm mount" in f for f in found), found


def test_unmounted_engine_folder(single, tmp_path):
    def repository_only(d):  # the claim's repository folder alone, where the whole deployment folder belongs
        models = container(d)["volumeMounts"][1]
        models.update(mountPath=models["mountPath"] + "/repository", subPath=models["subPath"] + "/repository")

    found = broken(single, tmp_path, "deployment.yaml", repository_only)
    assert any("/models/trt-none/target (target engine) is not mounted" in f for f in found), found
    assert any(
        "/models/trt-none/target (tensorrt_llm/config.pbtxt gpt_model_path) is not mounted" in f for f in found
    ), found  # what the repository's config.pbtxt reads


def test_hpa_aimed_at_another_workload(single, tmp_path):
    found = broken(single, tmp_path, "hpa.yaml", lambda d: d["spec"]["scaleTargetRef"].update(name="other"))
    assert any("spec.scaleTargetRef" in f for f in found), found


def test_slurm_rank_that_differs_from_the_script(multi, tmp_path):
    recipe, layout, folder = multi
    copy = tmp_path / "bundle"
    shutil.copytree(folder, copy)
    ranks = copy / "slurm" / "ranks.sh"
    ranks.write_text(ranks.read_text().replace("prefix5_", "prefix50_"))
    found = [str(f) for f in validate_bundle(copy, resolve_build(recipe), layout, bundle_folder=folder)]
    assert any("slurm/ranks.sh: rank 5:" in f for f in found), found


def test_stale_repository_port(single, tmp_path):
    recipe, layout, folder = single
    script = layout.repository() / "launch_triton.sh"
    original = script.read_text()
    try:
        script.write_text(original.replace("echo 8000", "echo 8080"))
        found = [str(f) for f in validate_bundle(folder, resolve_build(recipe), layout)]
    finally:
        script.write_text(original)
    assert any("not the one this recipe implies" in f for f in found)
    assert any("HTTP_PORT: 8080 but recipe triton.http_port is 8000" in f for f in found), found


def test_check_bundle_raises_one_user_error(single, tmp_path):
    recipe, layout, folder = single
    copy = tmp_path / "bundle"
    shutil.copytree(folder, copy)
    (copy / "service.yaml").unlink()
    with pytest.raises(UserError, match="kustomization.yaml: resources: lists service.yaml, which does not exist"):
        check_bundle(copy, resolve_build(recipe), layout, schemas=True, bundle_folder=folder)


def test_an_invalid_recipe_leaves_the_old_bundle(single, tmp_path):
    recipe, layout, folder = single
    before = (folder / "deployment.yaml").read_text()
    for version, message in (
        ("1.2.7", "no NGC tritonserver image ships TensorRT-LLM 1.2.7"),
        (
            "0.9.0",
            "deploy.image.trtllm_version: is 0.9.0 but specbuild builds TensorRT engines "
            "with TensorRT-LLM 0.17 <= version <= 1\\.3\\.0rc20",
        ),
    ):
        bad = make_recipe("none", {"deploy.image": {"trtllm_version": version}})
        with pytest.raises(UserError, match=message):
            write_bundle(resolve_build(bad), layout)
    assert (folder / "deployment.yaml").read_text() == before
    assert not list(folder.parent.glob(".*partial*"))
