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
from typing import TYPE_CHECKING


if TYPE_CHECKING:
    pass


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


def _summary(mode: str, world: int, nodes: int, gpus: int, tp_pp: int | None) -> str:
    return f"{mode} mode, {world} MPI rank(s) = {nodes} node(s) x {gpus} GPU(s)" + (
        f" (tp*pp = {tp_pp})" if tp_pp is not None else ""
    )


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
