"""Where every MPI rank of a deployment runs: nodes x GPUs (tensorrtllm_backend README.md@0b9d7d5 leader mode;
triton-inference-server/tutorials Deployment/Kubernetes/EKS_Multinode_Triton_TRTLLM@e848952).

Leader mode (one rank per GPU, world = tp * pp): a world that fits `deploy.gpus_per_node` is one pod on one node;
a larger one spans world / gpus_per_node pods of gpus_per_node GPUs each, ranks filled node by node (the order
mpirun fills a hostfile's slots and srun's block distribution gives). TensorRT-LLM picks a rank's GPU as
gpu_device_ids[rank % len(gpu_device_ids)] (cpp/include/tensorrt_llm/runtime/worldConfig.h, getDevice), so a
world spanning nodes lists one node's GPUs.

Orchestrator mode (draft-target): one node; the pod gets every GPU the two engines name.

LLM-API flavour (tensorrtllm_backend docs/llmapi.md@0b9d7d5; specbuild.repository.llmapi.launch.launch_mode),
llm_api.nodes being the one source of truth for the node count (deploy.gpus_per_node only bounds it; deploy/checks.py
refuses a contradiction):
- single: one tritonserver whose LLM runs tp * pp ranks on GPUs 0..tp*pp-1 of the pod (model.yaml names no GPU:
  the LLM takes the first tp*pp it sees, so triton.gpu_device_ids must be [0 .. tp*pp-1]);
- multi-instance: one tritonserver, llm_api.instances instances of tp * pp GPUs each (config.pbtxt
  gpu_device_ids "0,1;2,3"), no MPI; the pod gets every GPU they name;
- multi-node: tp * pp ranks over llm_api.nodes pods of tp*pp/nodes GPUs each, filled node by node; each rank
  takes its local rank's GPU; rank 0 serves.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

from specbuild.repository.engine import params
from specbuild.deploy.kind import deploy_kind
from specbuild.repository.llmapi.configs import MODEL, gpu_groups
from specbuild.repository.llmapi.launch import launch_mode

if TYPE_CHECKING:
    from specbuild.recipe.schema import Recipe
    from specbuild.speculation import Speculation


@dataclass(frozen=True)
class Rank:
    rank: int
    node: int
    gpu: int | None  # None: the orchestrator, which drives the engines' workers and owns no GPU
    does: str


@dataclass(frozen=True)
class World:
    mode: str  # "leader" | "orchestrator"
    world_size: int  # MPI ranks the launch starts
    nodes: int
    gpus_per_pod: int  # GPUs each pod (Slurm: each node) requests
    ranks_per_node: int
    spawn: bool  # orchestrator that spawns its engine workers (MPI_Comm_spawn: single node only)
    ranks: tuple[Rank, ...]
    engine_gpus: dict[str, list[int]] = field(default_factory=dict)  # Triton model -> its gpu_device_ids
    tp_pp: int = 1  # tp_size * pp_size of the target engine
    summary: str = ""  # one line for `specbuild plan` and bundle.json
    one_rank_per_gpu: bool = False  # every GPU of a pod runs one rank of the world (leader, llm-api single/multi-node)
    groups: dict[str, str] = field(default_factory=dict)  # the layout lines when ranks do not say it (instances)

    @property
    def multi_node(self) -> bool:
        return self.nodes > 1

    def ranks_on(self, node: int) -> list[Rank]:
        return [r for r in self.ranks if r.node == node]


def world_of(recipe: Recipe, spec: Speculation) -> World:
    return WORLD_KINDS[deploy_kind(recipe)](recipe, spec)


def _summary(mode: str, world: int, nodes: int, gpus: int, tp_pp: int | None) -> str:
    return f"{mode} mode, {world} MPI rank(s) = {nodes} node(s) x {gpus} GPU(s)" + (
        f" (tp*pp = {tp_pp})" if tp_pp is not None else ""
    )


def engine_world(recipe: Recipe, spec: Speculation) -> World:
    info = params.launch(recipe, "target", spec)
    t, b = recipe.triton, recipe.build
    tp_pp = b.tp_size * b.pp_size
    per_node = recipe.deploy.gpus_per_node
    engines = {"tensorrt_llm": list(t.gpu_device_ids)}
    if info["mode"] == "leader":
        ids = list(t.gpu_device_ids) or [0]
        world = int(info["world_size"])
        nodes = -(-world // per_node) if world > per_node else 1
        gpus = per_node if nodes > 1 else max(ids) + 1
        ranks = tuple(
            Rank(
                r,
                r // per_node if nodes > 1 else 0,
                ids[r % len(ids)],
                "serves HTTP/gRPC/metrics" if r == 0 else "engine shard",
            )
            for r in range(world)
        )
        return World(
            "leader",
            world,
            nodes,
            gpus,
            min(world, per_node),
            False,
            ranks,
            engines,
            tp_pp,
            _summary("leader", world, nodes, gpus, tp_pp),
            one_rank_per_gpu=True,
        )
    engines["tensorrt_llm_draft"] = list(recipe.draft_gpu_device_ids)
    used = set(engines["tensorrt_llm"]) | set(engines["tensorrt_llm_draft"]) or {0}
    world = int(info["world_size"])
    spawn = not info.get("disable_spawn_processes", False)
    ranks = [
        Rank(0, 0, None, "orchestrator: serves HTTP/gRPC/metrics" + ("; spawns one worker per engine" if spawn else ""))
    ]
    for model, ids in sorted(info.get("participant_ids", {}).items(), reverse=True):  # draft ranks first
        gpus = engines[model]
        for i, rank in enumerate(int(x) for x in ids.split(",")):
            ranks.append(Rank(rank, 0, gpus[i % len(gpus)], f"{model} participant"))
    ranks.sort(key=lambda r: r.rank)
    gpus = max(used) + 1
    return World(
        "orchestrator",
        world,
        1,
        gpus,
        world,
        spawn,
        tuple(ranks),
        engines,
        tp_pp,
        _summary("orchestrator", world, 1, gpus, None),
    )


def llmapi_world(recipe: Recipe, spec: Speculation) -> World:
    info = launch_mode(recipe)
    mode, b = info["mode"], recipe.build
    tp_pp = b.tp_size * b.pp_size
    if mode == "multi-instance":
        groups = gpu_groups(recipe)
        flat = [g for group in groups for g in group]
        gpus = max(flat) + 1
        lines = {
            "node 0": f"one tritonserver, {len(groups)} instances of {MODEL} (no MPI)",
            **{f"instance {i}": f"GPUs {','.join(map(str, g))} (tp*pp = {tp_pp})" for i, g in enumerate(groups)},
        }
        ranks = (
            Rank(0, 0, None, f"tritonserver: {len(groups)} instances of {MODEL}, no MPI; serves HTTP/gRPC/metrics"),
        )
        return World(
            mode,
            tp_pp,
            1,
            gpus,
            1,
            False,
            ranks,
            {MODEL: flat},
            tp_pp,
            f"multi-instance mode, {len(groups)} instance(s) x tp*pp = {tp_pp} in one tritonserver (no MPI)"
            f" = 1 node x {gpus} GPU(s)",
            groups=lines,
        )
    nodes = int(info.get("nodes", 1))
    per_node = -(-tp_pp // nodes)  # as launch.py: at least one (nodes that do not split tp*pp are refused)
    if mode == "multi-node":
        first, other = (
            "trtllm-llmapi-launch: tritonserver serves HTTP/gRPC/metrics, the LLM's leader",
            "trtllm-llmapi-launch: LLM worker",
        )
        summary = (
            f"multi-node mode, {tp_pp} MPI rank(s) under trtllm-llmapi-launch = {nodes} node(s) x {per_node} "
            f"GPU(s) (tp*pp = {tp_pp})"
        )
    else:
        first, other = "tritonserver serves HTTP/gRPC/metrics, the LLM's rank 0", "LLM worker (spawned in the pod)"
        summary = f"single mode, one tritonserver whose LLM runs tp*pp = {tp_pp} rank(s) = 1 node x {per_node} GPU(s)"
    # one instance: rank r on GPU r % per_node of node r // per_node (gpu_device_ids [0 .. tp*pp-1])
    ranks = tuple(Rank(r, r // per_node, r % per_node, other if r else first) for r in range(tp_pp))
    return World(
        mode,
        tp_pp,
        nodes,
        per_node,
        per_node,
        False,
        ranks,
        {MODEL: list(range(per_node))},
        tp_pp,
        summary,
        one_rank_per_gpu=True,
    )


WORLD_KINDS: dict[str, Callable[[Recipe, Speculation], World]] = {"engine": engine_world, "llm-api": llmapi_world}


def describe(world: World) -> dict[str, str]:
    """The layout for `specbuild plan`: one line per node."""
    if world.groups:
        return dict(world.groups)
    out = {}
    for node in range(world.nodes):
        ranks = world.ranks_on(node)
        gpus = [r.gpu for r in ranks if r.gpu is not None]
        what = f"ranks {ranks[0].rank}..{ranks[-1].rank}" if len(ranks) > 1 else f"rank {ranks[0].rank}"
        where = f" on GPUs {','.join(map(str, gpus))}" if gpus else ""
        out[f"node {node}"] = f"{what}{where}" + (" (rank 0 serves)" if node == 0 and len(ranks) > 1 else "")
    if world.spawn:
        out["spawned workers"] = "; ".join(
            f"{m} on GPU(s) {','.join(map(str, g))}" for m, g in world.engine_gpus.items()
        )
    return out
