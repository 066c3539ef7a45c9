"""Recipe rules of the `deploy` section (run by `specbuild check`; the bundle validator re-checks the files).

GPU ids across nodes: TensorRT-LLM gives rank r the GPU gpu_device_ids[r % len(gpu_device_ids)] and requires at
most gpus_per_node ids, each below it (cpp/tensorrt_llm/runtime/worldConfig.cpp). So a world larger than a node
lists ONE node's GPUs (len == gpus_per_node), not tp * pp of them: specbuild.recipe.deploy.expected_gpu_id_count
is the count the engine flavour's GPU-id rule (trtllm/checks.py) uses.

The llm-api flavour (tensorrtllm_backend docs/llmapi.md@0b9d7d5) takes its node count from llm_api.nodes, the one source
of truth (the repository's launch script depends on it: across nodes it wraps tritonserver in trtllm-llmapi-launch);
deploy.gpus_per_node only bounds it. A world larger than a node with llm_api.nodes 1, or more ranks per node than a node
has GPUs, is refused here with the field to change. One instance pins no GPU (model.yaml names none, the LLM takes the
first tp*pp GPUs it sees), so its gpu_device_ids must be [0 .. tp*pp-1]; several instances name theirs in config.pbtxt,
all inside one node's GPUs. The image must carry TensorRT-LLM 1.0 or newer of llm_api.release (a release no NGC
container ships gets no bundle unless deploy.image names one: deploy.context.applies says why).

What a bundle cannot hold is refused here, not when it is written: a Kubernetes release without API schemas to
validate against, LeaderWorkerSet replicas its webhook refuses, sbatch options that would contradict the ones the
bundle writes. (The schema's allow-lists and int bounds refuse the rest: specbuild.recipe.deploy.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

from specbuild.recipe.deploy import INT32_MAX, quantity_value
from specbuild.findings import Finding
from specbuild.deploy.context import BundleFlavour, applies, bundle_flavour
from specbuild.deploy.kubernetes import memory_for

if TYPE_CHECKING:
    from specbuild.recipe.schema import Recipe
    from specbuild.runtimes.build import Build
    from specbuild.speculation import Speculation

LWS_MIN_KUBERNETES = (1, 26)  # kubernetes-sigs/lws installation docs
MAX_WORLD = 4096  # MPI ranks of one deployment (one line each in slurm/ranks.sh; 512 nodes of 8 GPUs)
LWS_MAX_REPLICAS = 1_000_000  # kubernetes-sigs/lws pkg/webhooks/leaderworkerset_webhook.go@060ab4d
# The Kubernetes releases kubernetes-validate 1.37.0 carries schemas for (its utils.py, PyPI 1.37.0), when it is not
# installed; when it is, its own list.
KUBERNETES_RELEASES = tuple((1, minor) for minor in range(25, 38))
# sbatch options the bundle writes itself (the world, where the job runs and logs), and what sets each
_WORLD = "the world: build.tp_size, build.pp_size, deploy.gpus_per_node, llm_api.nodes"
SBATCH_SET = {
    "--nodes": _WORLD,
    "--ntasks": _WORLD,
    "--ntasks-per-node": _WORLD,
    "--gpus": _WORLD,
    "--gpus-per-node": _WORLD,
    "--gpus-per-task": _WORLD,
    "--job-name": "deploy.name",
    "--output": "the bundle's slurm/ folder",
    "--chdir": "the bundle folder the job is submitted from",
    "--partition": "deploy.slurm.partition",
    "--account": "deploy.slurm.account",
    "--time": "deploy.slurm.time",
    "--cpus-per-task": "deploy.slurm.cpus_per_task",
}


def kubernetes_versions() -> tuple[tuple[int, int], ...]:
    """The Kubernetes releases (major, minor) whose API schemas bundles are validated against."""
    try:
        from kubernetes_validate.utils import all_versions
    except ImportError:
        return KUBERNETES_RELEASES
    return tuple(sorted({tuple(int(x) for x in v.split(".")[:2]) for v in all_versions()}))


def _minor(release: tuple[int, int]) -> str:
    return ".".join(map(str, release))


TP_PP = (("build", "tp_size"), ("build", "pp_size"))


def deploy_findings(build: Build) -> Iterator[Finding]:
    recipe = build.recipe
    if applies(recipe, build.runtime) is not None:  # no bundle (the reference runtime serves with `specbuild serve`)
        return

    flavour = bundle_flavour(build.runtime)
    world = recipe.build.tp_size * recipe.build.pp_size
    if world > MAX_WORLD:  # (before anything lays the world out: a rank is a line of several files)
        yield Finding(
            ("build", "tp_size"),
            f"tp_size * pp_size = {world:,} MPI ranks, but a deployment bundle lists "
            f"every rank (slurm/ranks.sh) and node, and specbuild writes bundles for at most {MAX_WORLD:,} "
            "— use the parallelism your GPUs have",
            also=TP_PP[1:],
        )
        return
    world_problems = list(flavour.world_findings(recipe, build.spec))
    yield from world_problems
    yield from flavour.image_findings(recipe)
    # the rules that read the laid-out world run only on a world the recipe's checks accept
    laid_out = not world_problems and flavour.lays_out(recipe)
    yield from _kubernetes_findings(recipe, build.spec, flavour if laid_out else None)


def _kubernetes_findings(recipe: Recipe, spec: Speculation, laid_out: BundleFlavour | None) -> Iterator[Finding]:
    """`laid_out`: the flavour, when the world is laid out (None: the rules that read the world do not run)."""
    d = recipe.deploy
    k = d.kubernetes
    world = laid_out.world(recipe, spec) if laid_out is not None else None
    minor = tuple(int(x) for x in k.version.lstrip("v").split(".")[:2])
    known = kubernetes_versions()
    if minor not in known:
        yield Finding(
            ("deploy", "kubernetes", "version"),
            f"is {k.version}, not a Kubernetes release the bundle can "
            f"be validated against ({_minor(known[0])}..{_minor(known[-1])}: the API schemas of "
            f"kubernetes-validate) — write your cluster's release, or the nearest of those",
        )
    elif world and world.multi_node and minor < LWS_MIN_KUBERNETES:
        yield Finding(
            ("deploy", "kubernetes", "version"),
            f"is {k.version} but LeaderWorkerSet (a world spanning nodes) needs Kubernetes 1.26 or newer",
        )
    a = d.autoscaling
    if a.min_replicas > a.max_replicas:
        yield Finding(
            ("deploy", "autoscaling", "min_replicas"),
            f"is {a.min_replicas}, above max_replicas {a.max_replicas}",
            also=(("deploy", "autoscaling", "max_replicas"),),
        )
    # the LeaderWorkerSet rules its CRD lacks (kubernetes-sigs/lws pkg/webhooks/leaderworkerset_webhook.go)
    if world and world.multi_node:
        field = "max_replicas" if a.max_replicas > a.min_replicas else "min_replicas"
        most = max(a.min_replicas, a.max_replicas)
        if most > LWS_MAX_REPLICAS:
            yield Finding(
                ("deploy", "autoscaling", field),
                f"is {most} but a LeaderWorkerSet holds at most "
                f"{LWS_MAX_REPLICAS:,} replicas (groups of {world.nodes} pods; its admission webhook refuses "
                f"more) — use at most {LWS_MAX_REPLICAS}",
            )
        elif most * world.nodes > INT32_MAX:
            yield Finding(
                ("deploy", "autoscaling", field),
                f"is {most}: {most} groups x {world.nodes} pods exceeds "
                f"2^31 - 1, which the LeaderWorkerSet webhook refuses — use at most "
                f"{INT32_MAX // world.nodes}",
            )
    for i, option in enumerate(d.slurm.extra_sbatch):
        name = option.split("=", 1)[0]
        if name in SBATCH_SET:
            yield Finding(
                ("deploy", "slurm", "extra_sbatch", i),
                f"{option!r}: the bundle sets {name} itself "
                f"({SBATCH_SET[name]}) — remove it"
                + (f", or set {SBATCH_SET[name]}" if SBATCH_SET[name].startswith("deploy.") else ""),
            )
    memory = memory_for(k, world.gpus_per_pod if world else 1)
    if quantity_value(d.shm_size) > quantity_value(memory):
        yield Finding(
            ("deploy", "shm_size"),
            f"is {d.shm_size} but the pod's memory is {memory}: /dev/shm "
            "counts against the memory limit — raise deploy.kubernetes.memory or lower shm_size",
            also=(("deploy", "kubernetes", "memory"),),
        )
    if (
        k.termination_grace_period_s is not None
        and k.termination_grace_period_s <= k.pre_stop_sleep_s + d.exit_timeout_s
    ):
        yield Finding(
            ("deploy", "kubernetes", "termination_grace_period_s"),
            f"is {k.termination_grace_period_s} s "
            f"but preStop ({k.pre_stop_sleep_s} s) + exit_timeout_s ({d.exit_timeout_s} s) need more: the "
            "kubelet would SIGKILL tritonserver mid-drain",
        )
