"""Hostile values for the deployment bundles: a recipe is data, and nothing in it may become code on a cluster.

1. Every field of the recipe's `deploy` section (found by walking the schema, so a new field is covered the day it
   is added) fed the classic injection strings is refused by `specbuild check`, located at file:line:col with the
   field named; every int field refuses what its manifest or flag cannot hold. A recipe changed in code after it
   was loaded (which skips the schema) still gets no bundle from such a value.
2. Every path a bundle embeds (the checkpoint folders, the output folders, hence the bundle's own folder) holding
   those strings: the bundle is written and then RUN — the sbatch script, each Slurm task's ranks.sh, enroot.conf
   sourced, copy-models.sh (into a folder and into the claim), the containers' commands and the leader's script,
   the bash blocks of README.md — with bash in a temp folder, with stand-ins on PATH for every program they call
   (sbatch, srun, scontrol, enroot, apptainer, kubectl, ssh, mpirun, ...) that only record their arguments
   (kubectl runs the loader pod's `sh -c` locally, into a folder standing for the claim). A file named PWNED
   anywhere would prove execution; each run must also reach its last command (its recorded arguments), so a
   script that merely failed to parse cannot pass.
3. What Kubernetes cannot hold is refused by `check`, not only when the bundle is written: replicas of 2^31 and
   10^15, an unknown Kubernetes release, an image reference with a newline; two recipe names that differ only past
   40 characters (or in case) get different objects, claim and folders.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import typing
from pathlib import Path

import pytest
from deploy_helpers import ROOT, compile_layout, layout_in, make_recipe, recipe_data
from pydantic import BaseModel
from script_helpers import Runner, bash_blocks

from specbuild.deploy.bundle import build_bundle, write_bundle
from specbuild.deploy.checks import deploy_findings
from specbuild.deploy.context import k8s_name
from specbuild.recipe.deploy import DeploySection
from specbuild.deploy.yamlio import load_all
from specbuild.errors import RecipeError, UserError
from specbuild.load import load_build
from specbuild.runtimes.build import resolve_build

MARKER = "PWNED"
# The classic strings, each aimed at one quoting context (none holds a '/': they must also fit a folder name).
INJECTIONS = [
    f"$(touch {MARKER})",
    f"`touch {MARKER}`",
    f'"; touch {MARKER}; "',
    f"'; touch {MARKER}; '",
    f"x\ntouch {MARKER}\n",
    f"x; touch {MARKER}",
    f"x && touch {MARKER} || touch {MARKER}",
    f"x | touch {MARKER}",
    f"${{IFS}}$(touch${{IFS}}{MARKER})",
    f"x\r\ntouch {MARKER}",
]
TINY = ROOT / "checkpoints" / "tiny"


# --- 1. every deploy field ---------------------------------------------------------------------------------------


def leaf_fields(model: type[BaseModel] = DeploySection, prefix: tuple = ("deploy",)) -> dict[tuple, object]:
    """Every leaf field of the deploy section: path -> its annotation."""
    out = {}
    for name, field in model.model_fields.items():
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            out.update(leaf_fields(ann, (*prefix, name)))
        else:
            out[(*prefix, name)] = ann
    return out


FIELDS = leaf_fields()


def is_list(annotation) -> bool:
    return typing.get_origin(annotation) is list


def hostile_recipe(tmp_path: Path, values: dict[tuple, object], stem: str = "eagle") -> Path:
    """A shipped tensorrt-llm recipe with `values` set (path -> value), written with a YAML emitter."""
    from ruamel.yaml import YAML

    data = recipe_data(stem)
    for section in ("model", "speculation"):
        if "checkpoint" in data.get(section, {}):
            data[section]["checkpoint"] = str(
                (ROOT / "recipes" / "tensorrt-llm" / data[section]["checkpoint"]).resolve()
            )
    for path, value in values.items():
        node = data
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = value
    out = tmp_path / "hostile.yaml"
    with open(out, "w") as f:
        YAML().dump(data, f)
    return out


def problems_of(path: Path) -> dict[str, object]:
    with pytest.raises(RecipeError) as info:
        load_build(path, check_files=False)
    return {p.field: p for p in info.value.problems}


def test_the_walk_finds_every_kind_of_deploy_field():
    assert len(FIELDS) >= 40
    for path in [
        ("deploy", "slurm", "partition"),
        ("deploy", "slurm", "extra_sbatch"),
        ("deploy", "mount_root"),
        ("deploy", "slurm", "image_file"),
        ("deploy", "image", "repository"),
        ("deploy", "image", "tag"),
        ("deploy", "autoscaling", "max_replicas"),
        ("deploy", "kubernetes", "probes", "timeout_s"),
    ]:
        assert path in FIELDS


@pytest.mark.parametrize("injection", INJECTIONS, ids=range(len(INJECTIONS)))
def test_every_deploy_field_refuses_injection_at_check(tmp_path, injection):
    values = {path: [injection] if is_list(ann) else injection for path, ann in FIELDS.items()}
    found = problems_of(hostile_recipe(tmp_path, values))
    for path, ann in FIELDS.items():
        field = ".".join(path) + ("[0]" if is_list(ann) else "")
        assert field in found, (field, sorted(found))
        assert found[field].line is not None and found[field].col is not None, found[field]


def base_types(annotation) -> set:
    """The plain types an annotation stands for (Annotated, Optional and unions unwrapped)."""
    if typing.get_origin(annotation) is typing.Annotated:
        return base_types(typing.get_args(annotation)[0])
    args = typing.get_args(annotation)
    if args and typing.get_origin(annotation) is not list:
        return set().union(*(base_types(a) for a in args))
    return {annotation}


INT_FIELDS = [path for path, ann in FIELDS.items() if int in base_types(ann)]


INT64_FIELDS = [("deploy", "kubernetes", "termination_grace_period_s")]  # (int64 in Kubernetes)


def test_every_int_field_refuses_what_its_file_cannot_hold(tmp_path):
    assert len(INT_FIELDS) >= 12, INT_FIELDS
    int32 = [p for p in INT_FIELDS if p not in INT64_FIELDS]
    for value, fields in ((-1, INT_FIELDS), (2**31, int32), (10**15, int32), (2**63, INT64_FIELDS)):
        found = problems_of(hostile_recipe(tmp_path, {path: value for path in fields}))
        for path in fields:
            assert ".".join(path) in found, (path, value, sorted(found))
            assert found[".".join(path)].line is not None


def test_check_cli_names_file_line_and_field(tmp_path):
    path = hostile_recipe(
        tmp_path,
        {("deploy", "slurm", "partition"): INJECTIONS[4], ("deploy", "slurm", "image_file"): '/x"; touch PWNED; "'},
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT / "pipeline"))
    run = subprocess.run(
        [sys.executable, "-m", "specbuild.cli", "check", str(path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        cwd=tmp_path,
    )
    assert run.returncode == 2 and "Traceback" not in run.stderr + run.stdout
    out = run.stderr + run.stdout
    assert re.search(rf"{re.escape(str(path))}:\d+:\d+: deploy\.slurm\.partition: must be Slurm partition", out), out
    assert re.search(r"hostile\.yaml:\d+:\d+: deploy\.slurm\.image_file: must be a file path", out), out
    assert not (tmp_path / MARKER).exists()


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    recipe = make_recipe("eagle")
    return recipe, compile_layout(tmp_path_factory.mktemp("compiled"), recipe)


def with_value(section, path: tuple, value):
    """A copy of a pydantic section with the leaf at `path` replaced, skipping validation (model_copy)."""
    if len(path) == 1:
        return section.model_copy(update={path[0]: value})
    return section.model_copy(update={path[0]: with_value(getattr(section, path[0]), path[1:], value)})


@pytest.mark.parametrize(
    "path", sorted(p for p, ann in FIELDS.items() if p not in INT_FIELDS), ids=lambda p: ".".join(p[1:])
)
def test_a_value_that_skipped_the_schema_gets_no_bundle(compiled, path):
    recipe, layout = compiled
    for injection in (INJECTIONS[0], INJECTIONS[4]):
        value = [injection] if is_list(FIELDS[path]) else injection
        bad = recipe.model_copy(update={"deploy": with_value(recipe.deploy, path[1:], value)})
        with pytest.raises(UserError, match=re.escape(".".join(path))):
            build_bundle(resolve_build(bad), layout)


# --- 2. paths the bundle embeds, and the rendered files run -------------------------------------------------------


def fake_checkpoints(root: Path, name: str) -> Path:
    """The tiny zoo's folders, copied under a folder whose name is hostile."""
    folder = root / name
    folder.mkdir(parents=True)
    for sub in ("target", "eagle", "eagle3"):
        shutil.copytree(TINY / sub, folder / sub)
    return folder


def assert_not_executed(root: Path) -> None:
    hits = [p for p in root.rglob(MARKER)] + [p for p in Path.cwd().glob(MARKER)]
    assert not hits, hits


COMBINED = "".join(INJECTIONS[:4]) + INJECTIONS[6]
PATH_CASES = {
    # (recipe stem, changes, the hostile folder name)
    "engine-enroot": ("eagle", {"name": "trt-eagle-h", "deploy.slurm": {"container_runtime": "enroot"}}, COMBINED),
    "engine-newline-pyxis": ("eagle", {"name": "trt-eagle-n"}, INJECTIONS[4] + INJECTIONS[9]),
    "llmapi-2nodes-apptainer": (
        "llmapi_eagle3",
        {
            "name": "trt-e3-h",
            "build.tp_size": 16,
            "llm_api.nodes": 2,
            "triton.gpu_device_ids": list(range(16)),
            "deploy.slurm": {"container_runtime": "apptainer"},
        },
        INJECTIONS[0] + INJECTIONS[1] + INJECTIONS[8],
    ),
}


@pytest.mark.parametrize("case", sorted(PATH_CASES))
def test_hostile_paths_run_nothing(tmp_path, case):
    stem, changes, hostile = PATH_CASES[case]
    root = tmp_path / f"out{hostile}"  # the output folders: engines, repository and the bundle itself
    ckpt = fake_checkpoints(tmp_path, f"ckpt{hostile}")
    spec = "eagle3" if stem.startswith("llmapi") else "eagle"
    recipe = make_recipe(
        stem, {**changes, "model.checkpoint": str(ckpt / "target"), "speculation.checkpoint": str(ckpt / spec)}
    )
    assert hostile in str(recipe.model_dir)
    layout = compile_layout(root, recipe)
    bundle = write_bundle(resolve_build(recipe), layout, validate=True)
    assert hostile in str(bundle)
    runner = Runner(tmp_path)
    name = k8s_name(recipe)

    # copy-models.sh, into a folder (the Slurm models folder) and into the claim through the loader pod
    models = bundle / "models"
    copy = runner.bash(str(bundle / "copy-models.sh"), str(models))
    assert copy.returncode == 0, copy.stderr
    assert (models / name / "repository" / "launch_triton.sh").is_file()
    copy = runner.bash(str(bundle / "copy-models.sh"), "kubernetes")
    assert copy.returncode == 0, copy.stderr
    assert sorted(p.relative_to(runner.claim / name).parts[0] for p in (runner.claim / name).iterdir()) == sorted(
        p.name for p in (models / name).iterdir()
    )

    # the sbatch script, submitted from the bundle folder: where it lies now (a folder name the container mounts
    # cannot hold: refused), and copied to the cluster, where it must reach its last srun
    sbatch = runner.bash(str(bundle / "slurm" / f"{name}.sbatch"), SLURM_SUBMIT_DIR=str(bundle))
    assert sbatch.returncode == 2 and "cannot hold a space" in sbatch.stderr, sbatch.stderr
    cluster = tmp_path / "cluster" / name
    shutil.copytree(bundle, cluster)
    runner.clear()
    sbatch = runner.bash(
        str(cluster / "slurm" / f"{name}.sbatch"), SLURM_SUBMIT_DIR=str(cluster), SLURM_JOB_NODELIST="node[1-2]"
    )
    assert sbatch.returncode == 0, sbatch.stderr
    last = runner.calls()[-1]
    assert last[0] == "srun" and last[-2:] == ["bash", str(cluster / "slurm" / "ranks.sh")], last
    assert not any(hostile in arg for call in runner.calls() for arg in call)  # nothing of the build machine
    if (bundle / "slurm" / "enroot.conf").is_file():
        conf = runner.bash(
            "-c", 'source "$1" && environ >/dev/null && echo sourced', "conf", str(bundle / "slurm" / "enroot.conf")
        )
        assert conf.stdout.strip() == "sourced", conf.stderr

    # each Slurm task; the containers' commands, with the containers' tree mapped to the filled folder (the
    # cluster's copy: a hostile folder name pasted into a script by this test would prove nothing)
    tree, filled = f"/models/{name}", cluster / "models" / name
    for rank in range(min(2, recipe.build.tp_size * recipe.build.pp_size)):
        text = (bundle / "slurm" / "ranks.sh").read_text().replace(tree, str(filled))
        task = runner.work / "ranks.sh"
        task.write_text(text)
        runner.clear()
        run = runner.bash(
            str(task),
            SLURM_PROCID=str(rank),
            TRITONSERVER=str(runner.bin / "tritonserver"),
            TRTLLM_LLMAPI_LAUNCH=str(runner.bin / "trtllm-llmapi-launch"),
        )
        ran = runner.calls()
        # engine leader mode execs the image's tritonserver (absent here: 127); llm-api runs the launch script
        assert ran or (run.returncode == 127 and "/opt/tritonserver/bin/tritonserver" in run.stderr), run.stderr
    workload = next(
        load_all((bundle / f).read_text())[0]
        for f in ("deployment.yaml", "leaderworkerset.yaml")
        if (bundle / f).is_file()
    )
    if workload["kind"] == "LeaderWorkerSet":
        c = workload["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["containers"][0]
        assert c["command"][:2] == ["bash", "-c"]
        runner.clear()
        run = runner.bash(
            "-c",
            c["command"][2].replace(tree, str(filled)),
            POD_NAME=f"{name}-0",
            POD_NAMESPACE="default",
            OMPI_MCA_orte_default_hostfile=str(runner.work / "hostfile"),
            TRITONSERVER=str(runner.bin / "tritonserver"),
        )
        assert run.returncode == 0, run.stderr
        assert runner.calls()[-1][0] == "mpirun", runner.calls()
        assert "FROM nvcr.io/nvidia/tritonserver:" in (bundle / "Containerfile").read_text()
    else:
        c = workload["spec"]["template"]["spec"]["containers"][0]
        runner.clear()
        run = runner.bash(
            *[w.replace(tree, str(filled)) for w in c["command"][1:]], TRITONSERVER=str(runner.bin / "tritonserver")
        )
        assert run.returncode == 0, run.stderr
        assert runner.calls()[-1][0] == "mpirun"  # the repository's launch script ran to its exec

    # README.md's bash blocks as a reader pastes them in the bundle folder (BUNDLE: its copy on the cluster)
    for block in bash_blocks((bundle / "README.md").read_text()):
        runner.clear()
        run = runner.bash("-c", block.replace("BUNDLE", str(cluster)), cwd=bundle)
        assert runner.calls(), (block, run.stderr)
    assert_not_executed(tmp_path)


# --- 3. what a bundle cannot hold, refused at check -------------------------------------------------------------


def findings_of(changes: dict, stem: str = "none") -> dict[str, str]:
    return {".".join(map(str, f.path)): f.message for f in deploy_findings(resolve_build(make_recipe(stem, changes)))}


@pytest.mark.parametrize("value", [2**31, 10**15])
def test_replicas_beyond_int32_are_refused(tmp_path, value):
    for key in ("min_replicas", "max_replicas"):
        found = problems_of(hostile_recipe(tmp_path, {("deploy", "autoscaling", key): value}))
        assert "32-bit" in found[f"deploy.autoscaling.{key}"].message


def test_leader_worker_set_replicas_the_webhook_refuses():
    multi = {"name": "trt-tp8-pp2", "build.tp_size": 8, "build.pp_size": 2, "triton.gpu_device_ids": list(range(8))}
    found = findings_of({**multi, "deploy.autoscaling": {"min_replicas": 1, "max_replicas": 2_000_000}})
    assert "at most 1,000,000 replicas" in found["deploy.autoscaling.max_replicas"]
    assert findings_of({**multi, "deploy.autoscaling": {"min_replicas": 1, "max_replicas": 1_000_000}}) == {}


def test_unknown_kubernetes_release_is_refused_at_check(tmp_path):
    path = hostile_recipe(tmp_path, {("deploy", "kubernetes", "version"): "1.99"})
    with pytest.raises(RecipeError) as info:
        load_build(path, check_files=False)
    (problem,) = [p for p in info.value.problems if p.field == "deploy.kubernetes.version"]
    assert problem.line is not None and "1.25..1.37" in problem.message
    assert findings_of({"deploy.kubernetes": {"version": "1.33"}}) == {}


def test_image_reference_with_a_newline_is_refused_at_check(tmp_path):
    for key, value in (
        ("repository", "nvcr.io/nvidia/tritonserver\nRUN touch PWNED"),
        ("tag", "26.07-trtllm-python-py3\n"),
        ("repository", "nvcr.io/NVIDIA/Triton"),
    ):
        found = problems_of(hostile_recipe(tmp_path, {("deploy", "image", key): value}))
        assert found[f"deploy.image.{key}"].line is not None


def test_a_world_no_bundle_can_lay_out_is_refused_without_laying_it_out(tmp_path):
    """tp_size * pp_size = (2^31 - 1)^2 ranks, and llm_api.nodes that do not split the world: `check` answers with
    the field, at once (each rank is a line of several files; a layout is never built for them)."""
    big = problems_of(hostile_recipe(tmp_path, {("build", "tp_size"): 2**31 - 1, ("build", "pp_size"): 2**31 - 1}))
    assert "specbuild writes bundles for at most 4,096" in big["build.tp_size"].message
    for nodes in (3, 10**9):  # (llmapi_tp2: tp_size 2)
        uneven = problems_of(hostile_recipe(tmp_path, {("llm_api", "nodes"): nodes}, stem="llmapi_tp2"))
        assert "do not split evenly" in uneven["llm_api.nodes"].message


def test_sbatch_options_the_bundle_sets_are_refused():
    found = findings_of({"deploy.slurm": {"extra_sbatch": ["--exclusive", "--nodes=4", "--partition=big"]}})
    assert set(found) == {"deploy.slurm.extra_sbatch.1", "deploy.slurm.extra_sbatch.2"}
    assert "set deploy.slurm.partition" in found["deploy.slurm.extra_sbatch.2"]


def test_names_that_differ_past_truncation_get_their_own_objects(tmp_path):
    long = "speculative-" * 4
    names = [long + "a", long + "b", "Trt-Eagle", "trt_eagle", "trt-eagle"]
    recipes = [make_recipe("eagle", {"name": n}) for n in names]
    objects = [k8s_name(r) for r in recipes]
    assert len(set(objects)) == len(names), objects
    assert all(len(o) <= 40 and re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", o) for o in objects), objects
    assert objects[-1] == "trt-eagle"  # a name that is a label already stays as it is
    claims, folders = set(), set()
    for recipe in recipes[:2]:
        layout = layout_in(tmp_path / recipe.name, recipe)
        plan = build_bundle(resolve_build(recipe), layout, repository=False)[0]
        claims.add(plan.claim)
        folders.add(plan.tree)
    assert len(claims) == len(folders) == 2
