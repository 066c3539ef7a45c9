"""Deliberately broken llm-api bundles (and repositories beside them) fail validation with the file and field named:
a command that is not the repository's launch command, an unmounted checkpoint model.yaml names, a leader whose
mpirun runs another world, the wrong group size, an acceptance series the model does not export, the scaled model,
Slurm tasks that do not run the launch command or not under PMIx, a stale or relative model.yaml, a wrong instance
count, an unknown field (strict schema)."""

from __future__ import annotations

import shutil

import pytest
from deploy_helpers import compile_layout, make_recipe

from specbuild.deploy.bundle import write_bundle
from specbuild.deploy.bundle_check import validate_bundle
from specbuild.deploy.yamlio import dump_all, load_all
from specbuild.runtimes.build import resolve_build


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    recipe = make_recipe("llmapi_eagle3")
    layout = compile_layout(tmp_path_factory.mktemp("single"), recipe)
    return recipe, layout, write_bundle(resolve_build(recipe), layout, validate=True)


@pytest.fixture(scope="module")
def multi(tmp_path_factory):
    recipe = make_recipe(
        "llmapi_eagle3",
        {
            "name": "trt-llmapi-e3-tp16",
            "build.tp_size": 16,
            "llm_api.nodes": 2,
            "triton.gpu_device_ids": list(range(16)),
        },
    )
    layout = compile_layout(tmp_path_factory.mktemp("multi"), recipe)
    return recipe, layout, write_bundle(resolve_build(recipe), layout, validate=True)


@pytest.fixture(scope="module")
def instances(tmp_path_factory):
    recipe = make_recipe(
        "llmapi_tp2", {"name": "trt-llmapi-2x-tp2", "llm_api.instances": 2, "triton.gpu_device_ids": [0, 1, 2, 3]}
    )
    layout = compile_layout(tmp_path_factory.mktemp("instances"), recipe)
    return recipe, layout, write_bundle(resolve_build(recipe), layout, validate=True)


def broken(bundle, tmp_path, file, change, doc=0):
    recipe, layout, folder = bundle
    copy = tmp_path / "bundle"
    shutil.copytree(folder, copy)
    docs = load_all((copy / file).read_text())
    change(docs[doc])
    (copy / file).write_text(dump_all(docs))
    return [str(f) for f in validate_bundle(copy, resolve_build(recipe), layout, schemas=True, bundle_folder=folder)]


def edited_text(bundle, tmp_path, rel, change):
    recipe, layout, folder = bundle
    copy = tmp_path / "bundle"
    shutil.copytree(folder, copy)
    (copy / rel).write_text(change((copy / rel).read_text()))
    return [str(f) for f in validate_bundle(copy, resolve_build(recipe), layout, schemas=False, bundle_folder=folder)]


def in_repository(bundle, rel, change):
    """Validate the bundle against its repository with one file changed (restored afterwards)."""
    recipe, layout, folder = bundle
    path = layout.repository() / rel
    original = path.read_text()
    try:
        path.write_text(change(original))
        return [str(f) for f in validate_bundle(folder, resolve_build(recipe), layout, schemas=False)]
    finally:
        path.write_text(original)


def container(deployment):
    return deployment["spec"]["template"]["spec"]["containers"][0]


def leader(lws):
    return lws["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["containers"][0]


def test_the_bundles_are_valid_before_they_are_broken(single, multi, instances):
    for recipe, layout, folder in (single, multi, instances):
        assert validate_bundle(folder, resolve_build(recipe), layout, schemas=True) == []


def test_nvidia_launcher_instead_of_the_launch_command(single, tmp_path):
    found = broken(
        single,
        tmp_path,
        "deployment.yaml",
        lambda d: container(d).update(
            command=["python3", "/app/scripts/launch_triton_server.py", "--model_repo=/models"]
        ),
    )
    assert any(
        "deployment.yaml: spec.template.spec.containers[0].command" in f
        and "is not the repository's launch command" in f
        for f in found
    ), found


def test_unmounted_eagle3_head(single, tmp_path):
    head = "/models/trt-llmapi-eagle3/speculative-model"  # where the pods read it (deploy.mount_root)

    def model_only(d):  # the claim's model folder alone, where the whole deployment folder belongs
        models = container(d)["volumeMounts"][1]
        models.update(mountPath=models["mountPath"] + "/model", subPath=models["subPath"] + "/model")

    # llm_api.release 1.2 writes speculative_model_dir (repository/llmapi/releases.py)
    found = broken(single, tmp_path, "deployment.yaml", model_only)
    assert any(f"{head} (model.yaml speculative_config.speculative_model_dir) is not mounted" in f for f in found), (
        found
    )
    assert any(
        "tensorrt_llm/1/model.yaml speculative_config.speculative_model_dir" in f and "is not mounted" in f
        for f in found
    ), found  # read from the repository's model.yaml on disk too


def test_leader_whose_mpirun_runs_another_world(multi, tmp_path):
    def eight_ranks(d):
        c = leader(d)
        c["command"] = ["bash", "-c", c["command"][2].replace("-np 16", "-np 8")]

    found = broken(multi, tmp_path, "leaderworkerset.yaml", eight_ranks)
    assert any(
        "leaderTemplate.spec.containers[0].command" in f and "mpirun -np 8 but the world has tp*pp = 16" in f
        for f in found
    ), found
    assert any(
        "must end by exec-ing mpirun running the repository's launch command on every rank" in f for f in found
    ), found


def test_leader_that_runs_tritonserver_itself(multi, tmp_path):
    def direct(d):
        c = leader(d)
        lines = c["command"][2].rstrip().splitlines()
        lines[-1] = "exec /opt/tritonserver/bin/tritonserver --model-repository=/models"
        c["command"] = ["bash", "-c", "\n".join(lines) + "\n"]

    found = broken(multi, tmp_path, "leaderworkerset.yaml", direct)
    assert any("its last line is 'exec /opt/tritonserver/bin/tritonserver" in f for f in found), found


def test_hostfile_slots_that_are_not_the_ranks_per_pod(multi, tmp_path):
    def slots(d):
        c = leader(d)
        c["command"] = ["bash", "-c", c["command"][2].replace("slots=8", "slots=4")]

    found = broken(multi, tmp_path, "leaderworkerset.yaml", slots)
    assert any("hostfile slots ['4'] but each pod runs 8 rank(s)" in f for f in found), found


def test_group_size_that_is_not_llm_api_nodes(multi, tmp_path):
    found = broken(multi, tmp_path, "leaderworkerset.yaml", lambda d: d["spec"]["leaderWorkerTemplate"].update(size=4))
    assert any("spec.leaderWorkerTemplate.size" in f and "tp*pp = 16*1 = 16 but 4 pod(s) x 8" in f for f in found)
    assert any("needs 2 (llm_api.nodes)" in f for f in found), found


def test_unknown_field_in_the_worker_template(multi, tmp_path):
    found = broken(
        multi,
        tmp_path,
        "leaderworkerset.yaml",
        lambda d: d["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"].update(mpiRanks=8),
    )
    assert any(
        "spec.leaderWorkerTemplate.workerTemplate.spec" in f and "'mpiRanks' was unexpected" in f for f in found
    ), found


def test_acceptance_series_the_model_does_not_export(single, tmp_path):
    rule = {"record": "specbuild:acceptance_length:mean", "expr": "1 + rate(total_accepted_draft_tokens[5m])"}
    found = broken(single, tmp_path, "prometheusrule.yaml", lambda d: d["spec"]["groups"][0]["rules"].append(rule))
    assert any(
        "prometheusrule.yaml: spec.groups[0].rules[1]" in f and "per-response tensors, not metrics" in f for f in found
    ), found


def test_queue_compute_of_another_model(single, tmp_path):
    def bls(d):
        r = d["spec"]["groups"][0]["rules"][0]
        r["expr"] = r["expr"].replace('model="tensorrt_llm"', 'model="tensorrt_llm_bls"')

    found = broken(single, tmp_path, "prometheusrule.yaml", bls)
    assert any("should read model 'tensorrt_llm' only" in f for f in found), found


def test_slurm_task_that_runs_tritonserver_itself(multi, tmp_path):
    recipe, layout, _ = multi
    repository = f"/models/{recipe.name}/repository"
    found = edited_text(
        multi,
        tmp_path,
        "slurm/ranks.sh",
        lambda t: t.replace(
            f"exec bash {repository}/launch_triton.sh",
            f"exec trtllm-llmapi-launch /opt/tritonserver/bin/tritonserver --model-repository={repository}",
        ),
    )
    assert any("slurm/ranks.sh" in f and "must exec the repository's launch command" in f for f in found), found


def test_slurm_multi_node_without_pmix(multi, tmp_path):
    recipe, _, _ = multi
    found = edited_text(multi, tmp_path, f"slurm/{recipe.name}.sbatch", lambda t: t.replace("--mpi=pmix", "--mpi=none"))
    assert any(f"slurm/{recipe.name}.sbatch: srun: needs one `srun --mpi=pmix --ntasks=16" in f for f in found), found


def test_slurm_tasks_per_node(multi, tmp_path):
    recipe, _, _ = multi
    found = edited_text(
        multi,
        tmp_path,
        f"slurm/{recipe.name}.sbatch",
        lambda t: t.replace("#SBATCH --ntasks-per-node=8", "#SBATCH --ntasks-per-node=1"),
    )
    assert any("#SBATCH --ntasks-per-node: 1 but the world needs 8" in f for f in found), found


def test_stale_model_yaml(single):
    found = in_repository(
        single, "tensorrt_llm/1/model.yaml", lambda t: t.replace("max_draft_len: 3", "max_draft_len: 5")
    )
    assert any("model.yaml: speculative_config: differs from the model.yaml this recipe implies" in f for f in found), (
        found
    )


def test_relative_checkpoint_in_model_yaml(single):
    recipe, _, _ = single
    found = in_repository(
        single,
        "tensorrt_llm/1/model.yaml",
        lambda t: t.replace(f"model: {recipe.model_dir}\n", "model: checkpoints/tiny/target\n"),
    )
    assert any("model.yaml: model: 'checkpoints/tiny/target' is relative" in f for f in found), found


def test_missing_model_yaml(single):
    recipe, layout, folder = single
    path = layout.repository() / "tensorrt_llm" / "1" / "model.yaml"
    text = path.read_text()
    path.unlink()
    try:
        found = [str(f) for f in validate_bundle(folder, resolve_build(recipe), layout, schemas=False)]
    finally:
        path.write_text(text)
    assert any("model.yaml: missing: the llmapi model reads its LLM arguments there" in f for f in found), found


def test_instance_count_of_the_repository(instances):
    found = in_repository(instances, "tensorrt_llm/config.pbtxt", lambda t: t.replace("count: 2", "count: 3"))
    assert any("config.pbtxt: instance_group.count: 3 but llm_api.instances is 2" in f for f in found), found


def test_instance_gpus_of_the_repository(instances):
    found = in_repository(instances, "tensorrt_llm/config.pbtxt", lambda t: t.replace('"0,1;2,3"', '"0,1;4,5"'))
    assert any("gpu_device_ids: [0, 1, 4, 5] but the recipe names [0, 1, 2, 3]" in f for f in found), found


def test_stale_launch_script(single):
    found = in_repository(single, "launch_triton.sh", lambda t: t.replace("echo 8001", "echo 9001"))
    assert any("not the one this recipe implies" in f for f in found), found
    assert any("GRPC_PORT: 9001 but recipe triton.grpc_port is 8001" in f for f in found), found
