"""Bundles of the llm-api flavour (tensorrt-llm runtime): every recipes/tensorrt-llm/llmapi_*.yaml plus a tp 8 x pp 2
world over 2 nodes, an EAGLE-3 tp 16 world over 2 nodes (enroot) and 2 instances of tp 2 in one pod. Each bundle
validates strictly (test_bundle_valid.py runs them with the engine recipes); here: what each layout must hold,
read from the written files and the repository beside them (the expected values are upstream's,
tensorrtllm_backend docs/llmapi.md@0b9d7d5 and README.md@0b9d7d5, written by hand)."""

from __future__ import annotations

import re
import shlex

import pytest
from deploy_helpers import LLMAPI_RECIPES, VARIANTS, compile_layout, make_recipe

from specbuild.deploy.bundle import bundle_plan, write_bundle
from specbuild.deploy.bundle_check import validate_bundle
from specbuild.deploy.yamlio import load_all
from specbuild.repository.llmapi.model_yaml import load as load_model_yaml
from specbuild.runtimes.build import resolve_build

NAMES = [name for name, (stem, _) in VARIANTS.items() if stem.startswith("llmapi_")]


@pytest.fixture(scope="module")
def bundles(tmp_path_factory):
    recipes = {p.stem: make_recipe(p.stem) for p in LLMAPI_RECIPES}
    recipes.update({name: make_recipe(*VARIANTS[name]) for name in NAMES})
    out = {}
    for name, recipe in recipes.items():
        layout = compile_layout(tmp_path_factory.mktemp(name), recipe)
        out[name] = (recipe, layout, write_bundle(resolve_build(recipe), layout, validate=True))
    return out


def only(folder, file):
    return load_all((folder / file).read_text())[0]


def container_of(pod_template):
    return pod_template["spec"]["containers"][0]


def model_yaml_of(repository):
    return load_model_yaml((repository / "tensorrt_llm" / "1" / "model.yaml").read_text())


def launch_command(recipe):
    """The repository's launch command where the containers read it (deploy.mount_root /models)."""
    return ["bash", f"/models/{recipe.name}/repository/launch_triton.sh", "--exit-timeout-secs=30"]


def test_every_llmapi_example_is_bundled():
    assert sorted(p.stem for p in LLMAPI_RECIPES) == [
        "llmapi_draft_target",
        "llmapi_eagle3",
        "llmapi_prompt_lookup",
        "llmapi_tp2",
    ]


@pytest.mark.parametrize("name", [p.stem for p in LLMAPI_RECIPES] + NAMES)
def test_validates_and_mounts_every_checkpoint_model_yaml_names(bundles, name):
    recipe, layout, folder = bundles[name]
    assert validate_bundle(folder, resolve_build(recipe), layout, schemas=True) == []
    workload = only(folder, "leaderworkerset.yaml" if recipe.llm_api.nodes > 1 else "deployment.yaml")
    templates = (
        [workload["spec"]["leaderWorkerTemplate"][k] for k in ("leaderTemplate", "workerTemplate")]
        if recipe.llm_api.nodes > 1
        else [workload["spec"]["template"]]
    )
    data = model_yaml_of(folder / "repository")  # the repository the pods serve
    named = [data["model"], data["tokenizer"]]
    spec = data.get("speculative_config") or {}
    named += [spec[k] for k in ("speculative_model", "speculative_model_dir") if k in spec]
    tree = f"/models/{recipe.name}"
    for template in templates:
        mounts = {m["mountPath"]: m for m in container_of(template)["volumeMounts"]}
        assert mounts[tree]["readOnly"] is True and mounts[tree]["subPath"] == recipe.name
        for path in named:
            assert path.startswith(tree + "/"), (path, tree)
        assert mounts["/dev/shm"]["name"] == "dshm" and [m["name"] for m in mounts.values()].count("models") == 1
    copies = (folder / "copy-models.sh").read_text()
    assert "engines" not in copies  # the LLM loads checkpoints: nothing built ahead of time
    # the image carries llm_api.release (1.2 -> TensorRT-LLM 1.2.1: containers 26.04-26.07, the newest taken)
    assert container_of(templates[0])["image"] == "nvcr.io/nvidia/tritonserver:26.07-trtllm-python-py3"
    # monitoring: the queue:compute ratio of tensorrt_llm, no acceptance series (counters are response tensors)
    rule = only(folder, "prometheusrule.yaml")
    records = {r["record"]: r["expr"] for r in rule["spec"]["groups"][0]["rules"]}
    assert list(records) == ["triton:queue_compute:ratio"]
    assert set(re.findall(r'model="([^"]+)"', records["triton:queue_compute:ratio"])) == {"tensorrt_llm"}
    readme = (folder / "README.md").read_text()
    assert "per-response output tensors" in readme and "not Prometheus metrics" in readme
    assert "`nv_inference_*`" in readme


@pytest.mark.parametrize("name", ["llmapi_draft_target", "llmapi_eagle3", "llmapi_prompt_lookup", "llmapi_tp2"])
def test_single_node_runs_exactly_the_launch_command(bundles, name):
    recipe, layout, folder = bundles[name]
    c = container_of(only(folder, "deployment.yaml")["spec"]["template"])
    assert c["command"] == launch_command(recipe) and "args" not in c
    world = recipe.build.tp_size * recipe.build.pp_size  # tensor parallelism inside one tritonserver
    tp = model_yaml_of(layout.repository())["tensor_parallel_size"]
    assert c["resources"]["limits"]["nvidia.com/gpu"] == world == tp
    script = (layout.repository() / "launch_triton.sh").read_text()
    assert "trtllm-llmapi-launch" not in script.split("set -euo pipefail")[1]  # plain tritonserver on one node
    sbatch = (folder / "slurm" / f"{recipe.name}.sbatch").read_text()
    assert f"#SBATCH --nodes=1\n#SBATCH --ntasks-per-node=1\n#SBATCH --gpus-per-node={world}\n" in sbatch
    assert "srun --mpi=none --ntasks=1 " in sbatch
    ranks = (folder / "slurm" / "ranks.sh").read_text()
    assert ranks.rstrip().splitlines()[-1] == "exec " + shlex.join(launch_command(recipe))


def test_eagle3_head_is_the_mounted_speculative_model(bundles):
    recipe, layout, folder = bundles["llmapi_eagle3"]
    head = str(recipe.resolve(recipe.speculation.checkpoint))
    # llm_api.release 1.2 writes speculative_model_dir, the name 1.1 and 1.3.0rc3 both know (repository/llmapi/releases.py)
    assert model_yaml_of(layout.repository())["speculative_config"]["speculative_model_dir"] == head  # where compiled
    assert (
        model_yaml_of(folder / "repository")["speculative_config"]["speculative_model_dir"]
        == "/models/trt-llmapi-eagle3/speculative-model"
    )  # where the pods read it
    assert f"copy {head} trt-llmapi-eagle3/speculative-model" in (folder / "copy-models.sh").read_text()


def test_two_nodes_every_rank_runs_the_launch_command_under_mpi(bundles):
    recipe, layout, folder = bundles["llmapi-tp8-pp2-2nodes"]
    script = (layout.repository() / "launch_triton.sh").read_text()
    assert 'exec "$TRTLLM_LLMAPI_LAUNCH" "$TRITONSERVER"' in script  # rank 0 serves, the others are LLM workers
    lwt = only(folder, "leaderworkerset.yaml")["spec"]["leaderWorkerTemplate"]
    assert lwt["size"] == 2 and lwt["restartPolicy"] == "RecreateGroupOnPodRestart"
    leader, worker = (container_of(lwt[k]) for k in ("leaderTemplate", "workerTemplate"))
    assert leader["resources"]["limits"]["nvidia.com/gpu"] == worker["resources"]["limits"]["nvidia.com/gpu"] == 8
    lines = leader["command"][2].strip().splitlines()
    mpirun = "exec mpirun --allow-run-as-root -np 16 --map-by ppr:8:node "
    assert lines[-1] == mpirun + shlex.join(launch_command(recipe))
    assert '"$POD_NAME slots=8"' in leader["command"][2] and '"$worker slots=8"' in leader["command"][2]
    assert "ports" in leader and "ports" not in worker and "startupProbe" not in worker
    assert only(folder, "service.yaml")["spec"]["selector"] == {
        "leaderworkerset.sigs.k8s.io/name": recipe.name,
        "leaderworkerset.sigs.k8s.io/worker-index": "0",
    }
    assert {d["kind"] for f in ("rbac.yaml", "mpi.yaml") for d in load_all((folder / f).read_text())} == {
        "ServiceAccount",
        "Role",
        "RoleBinding",
        "ConfigMap",
    }
    assert (folder / "Containerfile").is_file()
    plan = bundle_plan(resolve_build(recipe), layout)
    assert plan["layout"] == {
        "node 0": "ranks 0..7 on GPUs 0,1,2,3,4,5,6,7 (rank 0 serves)",
        "node 1": "ranks 8..15 on GPUs 0,1,2,3,4,5,6,7",
    }
    sbatch = (folder / "slurm" / f"{recipe.name}.sbatch").read_text()
    assert "#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=8\n#SBATCH --gpus-per-node=8\n" in sbatch
    assert "srun --mpi=pmix --ntasks=16 --ntasks-per-node=8 --distribution=block " in sbatch
    ranks = (folder / "slurm" / "ranks.sh").read_text()
    assert "SLURM_PROCID" not in ranks  # every task runs the same command; trtllm-llmapi-launch reads the rank
    assert [ln for ln in ranks.splitlines() if ln.startswith("exec ")] == ["exec " + shlex.join(launch_command(recipe))]


def test_eagle3_tp16_on_enroot_binds_the_checkpoints(bundles):
    recipe, layout, folder = bundles["llmapi-eagle3-tp16-2nodes"]
    head = str(recipe.resolve(recipe.speculation.checkpoint))
    copies = (folder / "copy-models.sh").read_text()
    for path, sub in ((head, "speculative-model"), (str(recipe.model_dir), "model")):
        assert f"copy {path} {recipe.name}/{sub}" in copies
    sbatch = (folder / "slurm" / f"{recipe.name}.sbatch").read_text()
    assert "srun --mpi=pmix --ntasks=16 --ntasks-per-node=8 " in sbatch and "enroot start --conf" in sbatch
    assert f"TREE=/models/{recipe.name}\n" in sbatch and '--mount "$SOURCE:$TREE:none:x-create=dir,bind,ro"' in sbatch
    hpa = only(folder, "hpa.yaml")
    assert hpa["spec"]["scaleTargetRef"]["kind"] == "LeaderWorkerSet"


def test_two_instances_share_one_pod_without_mpi(bundles):
    recipe, layout, folder = bundles["llmapi-2x-tp2-instances"]
    c = container_of(only(folder, "deployment.yaml")["spec"]["template"])
    assert c["command"] == launch_command(recipe)
    assert c["resources"]["limits"]["nvidia.com/gpu"] == 4
    config = (layout.repository() / "tensorrt_llm" / "config.pbtxt").read_text()
    assert 'string_value: "0,1;2,3"' in config and re.search(r"count: 2\b", config)
    plan = bundle_plan(resolve_build(recipe), layout)
    assert plan["layout"]["instance 0"].startswith("GPUs 0,1") and plan["layout"]["instance 1"].startswith("GPUs 2,3")
    sbatch = (folder / "slurm" / f"{recipe.name}.sbatch").read_text()
    assert (
        "#SBATCH --ntasks-per-node=1\n#SBATCH --gpus-per-node=4\n" in sbatch and "srun --mpi=none --ntasks=1 " in sbatch
    )


def test_streaming_recipe_readme_asks_generate_stream(bundles):
    _, _, folder = bundles["llmapi_eagle3"]  # triton.streaming: true -> a decoupled model
    readme = (folder / "README.md").read_text()
    assert "/v2/models/tensorrt_llm/generate_stream" in readme and '"sampling_param_max_tokens": 32' in readme
    _, _, folder = bundles["llmapi_tp2"]  # not decoupled
    assert "/v2/models/tensorrt_llm/generate -d" in (folder / "README.md").read_text()
