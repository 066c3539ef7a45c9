"""Every tensorrt-llm example recipe (engine and llm-api flavours), plus a tp=8 x pp=2 (2 nodes of 8 GPUs),
draft-target tp=2, fast-logits and StatefulSet variant, and the llm-api variants (tp 8 x pp 2 and EAGLE-3 tp 16
over 2 nodes, 2 instances of tp 2: deploy_helpers.VARIANTS), gets a bundle that validates strictly: each
Kubernetes object against the Kubernetes schemas of the recipe's version (kubernetes-validate, strict), the
LeaderWorkerSet/PodMonitor/PrometheusRule against their CRDs, and every cross-check, with the GPU repository
compiled beside it (engine folders carry only config.json; llm-api repositories carry the test double's model.py).
`kubectl kustomize` renders each bundle (skipped, saying so, where kubectl is not installed)."""

from __future__ import annotations

import json
import subprocess

import pytest
from deploy_helpers import all_recipes, compile_layout

from specbuild.deploy.bundle import bundle_plan, write_bundle
from specbuild.deploy.bundle_check import kubectl_binary, render_kustomize, validate_bundle
from specbuild.deploy.yamlio import load_all
from specbuild.runtimes.build import resolve_build

RECIPES = all_recipes()


@pytest.fixture(scope="module")
def bundles(tmp_path_factory):
    out = {}
    for name, recipe in RECIPES.items():
        layout = compile_layout(tmp_path_factory.mktemp(name), recipe)
        out[name] = (recipe, layout, write_bundle(resolve_build(recipe), layout, validate=True))
    return out


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_bundle_validates_strictly(bundles, name):
    recipe, layout, folder = bundles[name]
    assert validate_bundle(folder, resolve_build(recipe), layout, schemas=True) == []
    written, shown = json.loads((folder / "bundle.json").read_text()), bundle_plan(resolve_build(recipe), layout)
    assert written["files"] == shown["files"] and written["layout"] == shown["layout"]
    assert written["world"] == shown["world"] and written["folder"] == str(folder)


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_kubectl_kustomize_renders_the_bundle(bundles, name):
    if kubectl_binary() is None:
        pytest.skip("kubectl is not installed here: `kubectl kustomize` rendering not checked")
    recipe, layout, folder = bundles[name]
    rendered = render_kustomize(folder)
    kinds = sorted(d["kind"] for d in rendered)
    assert "PodMonitor" in kinds and "PrometheusRule" in kinds and "Service" in kinds
    assert all(d["metadata"]["namespace"] == recipe.deploy.kubernetes.namespace for d in rendered)
    # the rendered stream (what `kubectl apply -k` sends) validates too
    assert validate_bundle(folder, resolve_build(recipe), layout, schemas=True, kubectl=True) == []


def test_two_nodes_of_eight_gpus_is_a_leader_worker_set(bundles):
    recipe, layout, folder = bundles["tp8-pp2-2nodes"]
    lws = load_all((folder / "leaderworkerset.yaml").read_text())[0]
    lwt = lws["spec"]["leaderWorkerTemplate"]
    assert lwt["size"] == 2 and lwt["restartPolicy"] == "RecreateGroupOnPodRestart"
    for key in ("leaderTemplate", "workerTemplate"):
        c = lwt[key]["spec"]["containers"][0]
        assert c["resources"]["limits"]["nvidia.com/gpu"] == 8
    leader = lwt["leaderTemplate"]["spec"]["containers"][0]
    assert (
        leader["command"][-1]
        .rstrip()
        .endswith("exec bash /models/trt-tp8-pp2/repository/launch_triton.sh --exit-timeout-secs=30")
    )  # deploy.mount_root
    assert "ports" not in lwt["workerTemplate"]["spec"]["containers"][0]
    plan = bundle_plan(resolve_build(recipe), layout)
    assert plan["layout"] == {
        "node 0": "ranks 0..7 on GPUs 0,1,2,3,4,5,6,7 (rank 0 serves)",
        "node 1": "ranks 8..15 on GPUs 0,1,2,3,4,5,6,7",
    }
    kinds = {d["kind"] for f in ("rbac.yaml", "mpi.yaml") for d in load_all((folder / f).read_text())}
    assert kinds == {"ServiceAccount", "Role", "RoleBinding", "ConfigMap"}
    hpa = load_all((folder / "hpa.yaml").read_text())[0]
    assert hpa["spec"]["scaleTargetRef"]["kind"] == "LeaderWorkerSet"
    sbatch = (folder / "slurm" / "trt-tp8-pp2.sbatch").read_text()
    assert "#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=8\n#SBATCH --gpus-per-node=8\n" in sbatch
    assert "srun --mpi=pmix --ntasks=16 " in sbatch


def test_draft_target_tp2_places_both_engines_on_the_recipes_gpus(bundles):
    recipe, layout, folder = bundles["draft-target-tp2"]
    dep = load_all((folder / "deployment.yaml").read_text())[0]
    c = dep["spec"]["template"]["spec"]["containers"][0]
    assert c["resources"]["limits"]["nvidia.com/gpu"] == 3  # draft on GPU 0, target on 1,2
    repo = folder / "repository"  # the repository the pods serve: the compiled one with the containers' paths
    target, draft = ((repo / m / "config.pbtxt").read_text() for m in ("tensorrt_llm", "tensorrt_llm_draft"))
    assert 'string_value: "1,2"' in target and 'string_value: "0"' in draft
    assert 'string_value: "/models/trt-dt-tp2/target"' in target
    assert 'string_value: "/models/trt-dt-tp2/draft"' in draft
    assert str(layout.engine("target")) in (layout.repository() / "tensorrt_llm" / "config.pbtxt").read_text()
    mounts = {m["mountPath"]: m["subPath"] for m in c["volumeMounts"] if m["name"] == "models"}
    assert mounts == {"/models/trt-dt-tp2": "trt-dt-tp2"}
    rule = load_all((folder / "prometheusrule.yaml").read_text())[0]
    records = {r["record"]: r["expr"] for r in rule["spec"]["groups"][0]["rules"]}
    assert 'model="tensorrt_llm_bls"' in records["triton:queue_compute:ratio"]
    assert "specbuild_spec_decode_num_accepted_tokens_total" in records["specbuild:acceptance_length:mean"]
    ranks = (folder / "slurm" / "ranks.sh").read_text()
    assert "exec bash /models/trt-dt-tp2/repository/launch_triton.sh --exit-timeout-secs=30" in ranks


def test_engine_methods_record_no_acceptance_length(bundles):
    _, _, folder = bundles["medusa"]
    rule = load_all((folder / "prometheusrule.yaml").read_text())[0]
    assert [r["record"] for r in rule["spec"]["groups"][0]["rules"]] == ["triton:queue_compute:ratio"]


def test_scripts_parse_in_bash(bundles):
    for _recipe, _layout, folder in bundles.values():
        for script in (folder / "slurm").iterdir():
            if script.suffix in (".sh", ".sbatch"):
                run = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
                assert run.returncode == 0, (script, run.stderr)


@pytest.mark.parametrize("runtime", ["pyxis", "enroot", "apptainer", "none"])
def test_every_container_runtime_validates(tmp_path, runtime):
    from deploy_helpers import make_recipe

    recipe = make_recipe("none", {"deploy.slurm": {"container_runtime": runtime, "partition": "gpu"}})
    layout = compile_layout(tmp_path, recipe)
    folder = write_bundle(resolve_build(recipe), layout, validate=True)
    sbatch = (folder / "slurm" / f"{recipe.name}.sbatch").read_text()
    marker = {
        "pyxis": "--container-image=nvcr.io#nvidia/tritonserver:",
        "enroot": "enroot start --conf",
        "apptainer": "apptainer exec --nv",
        "none": "--kill-on-bad-exit=1 bash ",
    }[runtime]
    assert marker in sbatch and "#SBATCH --partition=gpu" in sbatch


def test_reference_recipes_get_no_bundle(tmp_path):
    from deploy_helpers import ROOT, layout_in

    from specbuild.recipe.loader import load_recipe

    recipe = load_recipe(ROOT / "recipes" / "reference" / "none.yaml", check_files=False)
    assert write_bundle(resolve_build(recipe), layout_in(tmp_path, recipe)) is None
    assert bundle_plan(resolve_build(recipe), layout_in(tmp_path, recipe))["bundle"].startswith(
        "none: the reference runtime"
    )


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_the_plan_summarises_the_bundle_without_rendering_it(bundles, name, monkeypatch):
    """`specbuild plan` names the bundle's files from the deploy context: no manifest, script or document is made
    (bounded work: every renderer refuses to run), and the names are those the written bundle has."""
    import specbuild.deploy.bundle as bundle
    import specbuild.deploy.kubernetes as k8s
    import specbuild.deploy.slurm as slurm

    def refuse(*args, **kwargs):
        raise AssertionError("the plan rendered a file of the bundle")

    for module, names in (
        (bundle, ("dump_all", "copy_script", "bundle_readme", "container_repository")),
        (k8s, ("workload", "claim", "loader_pod", "containerfile")),
        (slurm, ("sbatch_script", "ranks_script", "enroot_conf")),
    ):
        for attr in names:
            monkeypatch.setattr(module, attr, refuse)
    recipe, layout, folder = bundles[name]
    shown = bundle_plan(resolve_build(recipe), layout)
    assert shown["files"] == json.loads((folder / "bundle.json").read_text())["files"]
