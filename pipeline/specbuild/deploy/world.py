"""Where every MPI rank of a deployment runs: nodes x GPUs (scale-out fact sheet §1.2, §2.2).

Leader mode (one rank per GPU, world = tp * pp): a world that fits `deploy.gpus_per_node` is one pod on one node;
a larger one spans world / gpus_per_node pods of gpus_per_node GPUs each, ranks filled node by node (the order
mpirun fills a hostfile's slots and srun's block distribution gives). TensorRT-LLM picks a rank's GPU as
gpu_device_ids[rank % len(gpu_device_ids)] (cpp/include/tensorrt_llm/runtime/worldConfig.h, getDevice), so a
world spanning nodes lists one node's GPUs.

Orchestrator mode (draft-target): one node; the pod gets every GPU the two engines name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from specbuild.triton import params

if TYPE_CHECKING:
    from specbuild.recipe.schema import Recipe


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

    @property
    def multi_node(self) -> bool:
        return self.nodes > 1

    def ranks_on(self, node: int) -> list[Rank]:
        return [r for r in self.ranks if r.node == node]


def world_of(recipe: Recipe) -> World:
    info = params.launch(recipe, "target")
    t, b = recipe.triton, recipe.build
    tp_pp = b.tp_size * b.pp_size
    per_node = recipe.deploy.gpus_per_node
    engines = {"tensorrt_llm": list(t.gpu_device_ids)}
    if info["mode"] == "leader":
        ids = list(t.gpu_device_ids) or [0]
        world = int(info["world_size"])
        nodes = -(-world // per_node) if world > per_node else 1
        gpus = per_node if nodes > 1 else max(ids) + 1
        ranks = tuple(Rank(r, r // per_node if nodes > 1 else 0, ids[r % len(ids)],
                           "serves HTTP/gRPC/metrics" if r == 0 else "engine shard")
                      for r in range(world))
        return World("leader", world, nodes, gpus, min(world, per_node), False, ranks, engines, tp_pp)
    engines["tensorrt_llm_draft"] = list(recipe.draft_gpu_device_ids)
    used = set(engines["tensorrt_llm"]) | set(engines["tensorrt_llm_draft"]) or {0}
    world = int(info["world_size"])
    spawn = not info.get("disable_spawn_processes", False)
    ranks = [Rank(0, 0, None, "orchestrator: serves HTTP/gRPC/metrics" +
                  ("; spawns one worker per engine" if spawn else ""))]
    for model, ids in sorted(info.get("participant_ids", {}).items(), reverse=True):  # draft ranks first
        gpus = engines[model]
        for i, rank in enumerate(int(x) for x in ids.split(",")):
            ranks.append(Rank(rank, 0, gpus[i % len(gpus)], f"{model} participant"))
    ranks.sort(key=lambda r: r.rank)
    return World("orchestrator", world, 1, max(used) + 1, world, spawn, tuple(ranks), engines, tp_pp)


def describe(world: World) -> dict[str, str]:
    """The layout for `specbuild plan`: one line per node."""
    out = {}
    for node in range(world.nodes):
        ranks = world.ranks_on(node)
        gpus = [r.gpu for r in ranks if r.gpu is not None]
        what = f"ranks {ranks[0].rank}..{ranks[-1].rank}" if len(ranks) > 1 else f"rank {ranks[0].rank}"
        where = f" on GPUs {','.join(map(str, gpus))}" if gpus else ""
        out[f"node {node}"] = f"{what}{where}" + (" (rank 0 serves)" if node == 0 and len(ranks) > 1 else "")
    if world.spawn:
        out["spawned workers"] = "; ".join(f"{m} on GPU(s) {','.join(map(str, g))}" for m, g in world.engine_gpus.items())
    return out
