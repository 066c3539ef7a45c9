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
container ships gets no bundle unless deploy.image names one: images.applies says why).

What a bundle cannot hold is refused here, not when it is written: a Kubernetes release without API schemas to
validate against, LeaderWorkerSet replicas its webhook refuses, sbatch options that would contradict the ones the
bundle writes. (The schema's allow-lists and int bounds refuse the rest: specbuild.recipe.deploy.)
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Iterator

from specbuild.deploy import images
from specbuild.recipe.deploy import INT32_MAX, quantity_value
from specbuild.findings import Finding
from specbuild.deploy.images import applies
from specbuild.deploy.kind import deploy_kind
from specbuild.deploy.kubernetes import memory_for
from specbuild.deploy.world import world_of

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

    kind = deploy_kind(recipe)
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
    world_problems = list(WORLD_RULES[kind](recipe, build.spec))
    yield from world_problems
    yield from IMAGE_RULES[kind](recipe)
    # the rules that read the laid-out world run only on a world the recipe's checks accept
    yield from _kubernetes_findings(recipe, build.spec, laid_out=not world_problems and LAYS_OUT[kind](recipe))


def _engine_world_findings(recipe: Recipe, spec: Speculation) -> Iterator[Finding]:
    d, t, b = recipe.deploy, recipe.triton, recipe.build
    per_node = d.gpus_per_node
    world = b.tp_size * b.pp_size
    where = ("deploy", "gpus_per_node")
    if spec.has_draft_engine:
        if world > per_node:
            yield Finding(
                where,
                f"is {per_node} but the draft-target target has tp_size * pp_size = {world}: "
                "draft-target runs in orchestrator mode, which spawns its workers on one node — use nodes "
                f"with at least {world} GPUs (raise gpus_per_node) or a smaller target",
                also=TP_PP,
            )
        used = sorted(set(t.gpu_device_ids) | set(recipe.draft_gpu_device_ids))
        if used and used[-1] >= per_node:
            yield Finding(
                ("triton", "draft_gpu_device_ids")
                if t.draft_gpu_device_ids and max(recipe.draft_gpu_device_ids) >= per_node
                else ("triton", "gpu_device_ids"),
                f"names GPU {used[-1]} but a node has {per_node} (deploy.gpus_per_node): the draft and "
                "target engines share one pod — use GPU ids below it",
                also=(where,),
            )
        return
    if world <= per_node:
        if t.gpu_device_ids and max(t.gpu_device_ids) >= per_node:
            yield Finding(
                ("triton", "gpu_device_ids"),
                f"names GPU {max(t.gpu_device_ids)} but a node has "
                f"{per_node} (deploy.gpus_per_node) — use ids 0..{per_node - 1}",
                also=(where,),
            )
        return
    if world % per_node:
        yield Finding(
            where,
            f"is {per_node} but tp_size * pp_size = {world} spans nodes and is not a multiple of "
            f"it: every node runs the same number of ranks — set gpus_per_node to a divisor of {world}",
            also=TP_PP,
        )
        return
    ids = list(t.gpu_device_ids)
    if len(ids) != per_node or sorted(ids) != list(range(per_node)):
        yield Finding(
            ("triton", "gpu_device_ids"),
            f"is {ids} but tp_size * pp_size = {world} spans "
            f"{world // per_node} nodes of {per_node} GPUs: list one node's GPUs, "
            f"{list(range(per_node))} (TensorRT-LLM runs rank r on gpu_device_ids[r % {per_node}] on "
            "every node)",
            also=(where,),
        )


def _llmapi_world_findings(recipe: Recipe, spec: Speculation) -> Iterator[Finding]:
    d, t, b, a = recipe.deploy, recipe.triton, recipe.build, recipe.llm_api
    per_node = d.gpus_per_node
    world = b.tp_size * b.pp_size
    where = ("deploy", "gpus_per_node")
    if a.nodes == 1 and a.instances == 1 and world > per_node:
        # (reported on build.tp_size when llm_api.nodes is not written: the message names both)
        yield Finding(
            ("llm_api", "nodes"),
            f"llm_api.nodes is 1 but tp_size * pp_size = {world} is more than a "
            f"node's {per_node} GPUs (deploy.gpus_per_node): set llm_api.nodes: "
            f"{_fewest_nodes(world, per_node)} (the "
            "repository's launch script then runs tritonserver under trtllm-llmapi-launch on every rank), "
            f"or deploy.gpus_per_node: {world} if your nodes have that many GPUs",
            also=(where, *TP_PP),
        )
        return
    if a.nodes > 1 and world % a.nodes == 0 and world // a.nodes > per_node:  # (uneven splits: flavour checks)
        yield Finding(
            ("llm_api", "nodes"),
            f"is {a.nodes}, which puts {world // a.nodes} of the tp_size * pp_size = "
            f"{world} ranks on each node, but a node has {per_node} GPUs (deploy.gpus_per_node) — set "
            f"llm_api.nodes: {_fewest_nodes(world, per_node)}",
            also=(where, *TP_PP),
        )
        return
    ids = list(t.gpu_device_ids)
    if a.instances > 1:
        if ids and max(ids) >= per_node:
            yield Finding(
                ("triton", "gpu_device_ids"),
                f"names GPU {max(ids)} but a node has {per_node} "
                f"(deploy.gpus_per_node): the {a.instances} instances share one pod — use ids 0..{per_node - 1}",
                also=(where, ("llm_api", "instances")),
            )
        return
    if ids != list(range(world)) and len(ids) == world:  # (a wrong count: flavour checks)
        yield Finding(
            ("triton", "gpu_device_ids"),
            f"is {ids} but one llm-api instance pins no GPU (model.yaml "
            f"names none; the LLM takes the first tp_size * pp_size GPUs it sees, and its pod"
            + (f"s get {world // a.nodes} each" if a.nodes > 1 else f" gets {world}")
            + f") — list {list(range(world))}",
            also=TP_PP,
        )


def _fewest_nodes(world: int, per_node: int) -> int:
    """The fewest nodes that split `world` ranks evenly with at most `per_node` on each."""
    return next(n for n in range(1, world + 1) if world % n == 0 and world // n <= per_node)


WORLD_RULES = {"engine": _engine_world_findings, "llm-api": _llmapi_world_findings}


def _llmapi_lays_out(recipe: Recipe) -> bool:
    """Whether llm_api.nodes splits the world evenly, one instance across nodes (the flavour's checks refuse the
    rest, saying why)."""
    a, b = recipe.llm_api, recipe.build
    return a.nodes == 1 or (
        a.instances == 1 and (b.tp_size * b.pp_size) % a.nodes == 0 and b.tp_size * b.pp_size >= a.nodes
    )


LAYS_OUT = {"engine": lambda recipe: True, "llm-api": _llmapi_lays_out}


def _ngc_tag(img) -> tuple[list[Finding], str | None]:
    """(findings, the TensorRT-LLM version it ships) of an NGC deploy.image.tag; version None when unknown."""
    m = re.match(r"^(\d\d\.\d\d)-(.+)$", img.tag)
    if not m or f"-{m.group(2)}" != images.TAG_SUFFIX:
        return [
            Finding(
                ("deploy", "image", "tag"),
                f"{img.tag!r} is not a `<yy.mm>{images.TAG_SUFFIX}` tag: "
                "only those NGC images carry the TensorRT-LLM backend",
            )
        ], None
    version = images.NGC_TRTLLM.get(m.group(1))
    if version is None:
        return [
            Finding(
                ("deploy", "image", "tag"),
                f"{img.tag}: specbuild does not know which TensorRT-LLM "
                f"container {m.group(1)} ships (its table ends at {max(images.NGC_TRTLLM)}) — pick a known "
                "tag, or name your own image in deploy.image.repository",
            )
        ], None
    return [], version


def _llmapi_image_findings(recipe: Recipe) -> Iterator[Finding]:
    img, release = recipe.deploy.image, recipe.llm_api.release
    rel = ("llm_api", "release")
    if img.trtllm_version:
        try:
            images.release3(img.trtllm_version)
        except ValueError:
            yield Finding(
                ("deploy", "image", "trtllm_version"),
                f"{img.trtllm_version!r} is not a version — write it as in pip, e.g. 1.2.1",
            )
            return
        if not images.serves_llmapi(img.trtllm_version):
            yield Finding(
                ("deploy", "image", "trtllm_version"),
                f"is {img.trtllm_version} but the llm-api flavour "
                "needs TensorRT-LLM 1.0 or newer (the llmapi Triton model is PyTorch-only from 1.0; NGC "
                "containers 25.09 and later)",
            )
            return
        if images.release_of(img.trtllm_version) != release:
            yield Finding(
                ("deploy", "image", "trtllm_version"),
                f"is {img.trtllm_version} but llm_api.release is "
                f"{release}: model.yaml is written in that release's spelling — name a {release}.x version "
                f'or set llm_api.release: "{images.release_of(img.trtllm_version)}"',
                also=(rel,),
            )
            return
        if not img.tag and images.tag_for(img.trtllm_version) is None:
            versions = sorted(
                {v for v in images.NGC_TRTLLM.values() if images.release_of(v) == release}, key=images.release3
            )
            yield Finding(
                ("deploy", "image", "trtllm_version"),
                f"no NGC tritonserver image ships TensorRT-LLM "
                f"{img.trtllm_version} (known {release}.x: {', '.join(versions) or 'none'}) — pick one of "
                "those or set deploy.image.tag",
            )
    # (a release no container ships, with no deploy.image: no bundle, said by `plan`: images.applies)
    if img.tag and img.repository == images.NGC_REPOSITORY:
        problems, version = _ngc_tag(img)
        yield from problems
        if version is None:
            return
        if not images.serves_llmapi(version):
            yield Finding(
                ("deploy", "image", "tag"),
                f"{img.tag} ships TensorRT-LLM {version}; the llm-api flavour "
                "needs 1.0 or newer (containers 25.09 and later)",
            )
        elif images.release_of(version) != release:
            tags = sorted(
                y + images.TAG_SUFFIX for y, v in images.NGC_TRTLLM.items() if images.release_of(v) == release
            )
            yield Finding(
                ("deploy", "image", "tag"),
                f"{img.tag} ships TensorRT-LLM {version} but llm_api.release is "
                f"{release} (model.yaml's spelling differs between releases) — pick a {release} container "
                f'({", ".join(tags) or "none yet"}) or set llm_api.release: "{images.release_of(version)}"',
                also=(rel,),
            )
        elif img.trtllm_version and images.release3(img.trtllm_version) != images.release3(version):
            yield Finding(
                ("deploy", "image", "tag"),
                f"{img.tag} ships TensorRT-LLM {version} but deploy.image.trtllm_version is {img.trtllm_version}",
                also=(("deploy", "image", "trtllm_version"),),
            )


def _engine_image_findings(recipe: Recipe) -> Iterator[Finding]:
    img = recipe.deploy.image
    if img.trtllm_version:
        try:
            images.release3(img.trtllm_version)
        except ValueError:
            yield Finding(
                ("deploy", "image", "trtllm_version"),
                f"{img.trtllm_version!r} is not a version — write it as in pip, e.g. 1.2.1",
            )
            return
        if not images.supported(img.trtllm_version):
            yield Finding(
                ("deploy", "image", "trtllm_version"),
                f"is {img.trtllm_version} but specbuild builds "
                "TensorRT engines with TensorRT-LLM 0.17 <= version <= 1.3.0rc20",
            )
        elif not img.tag and images.tag_for(img.trtllm_version) is None:
            known = sorted({v for v in images.NGC_TRTLLM.values() if images.supported(v)}, key=images.release3)
            yield Finding(
                ("deploy", "image", "trtllm_version"),
                f"no NGC tritonserver image ships TensorRT-LLM "
                f"{img.trtllm_version} (known: {', '.join(known)}) — pick one of those or set "
                "deploy.image.tag",
            )
    if img.tag and img.repository == images.NGC_REPOSITORY:
        problems, version = _ngc_tag(img)
        yield from problems
        if version is None:
            return
        if not images.supported(version):
            yield Finding(
                ("deploy", "image", "tag"),
                f"{img.tag} ships TensorRT-LLM {version}; specbuild's engines need 0.17 <= version <= 1.3.0rc20",
            )
        elif img.trtllm_version and images.release3(img.trtllm_version) != images.release3(version):
            yield Finding(
                ("deploy", "image", "tag"),
                f"{img.tag} ships TensorRT-LLM {version} but "
                f"deploy.image.trtllm_version is {img.trtllm_version}: engines load only in the release "
                "that built them",
                also=(("deploy", "image", "trtllm_version"),),
            )


IMAGE_RULES = {"engine": _engine_image_findings, "llm-api": _llmapi_image_findings}


def _kubernetes_findings(recipe: Recipe, spec: Speculation, *, laid_out: bool) -> Iterator[Finding]:
    d = recipe.deploy
    k = d.kubernetes
    world = world_of(recipe, spec) if laid_out else None
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
