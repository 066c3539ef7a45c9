"""Double of tensorrt_llm.mapping.Mapping (only what checkpoints record)."""


class Mapping:
    def __init__(
        self,
        world_size=1,
        rank=0,
        gpus_per_node=8,
        *,
        cp_size=1,
        tp_size=1,
        pp_size=1,
        moe_tp_size=-1,
        moe_ep_size=-1,
        **_ignored,
    ):
        # The real Mapping rejects an inconsistent layout; TP and PP are fixed here, at conversion
        # (examples/models/core/llama/convert_checkpoint.py --tp_size/--pp_size).
        if world_size != tp_size * pp_size * cp_size:
            raise ValueError(
                f"world_size must equal to tp_size * pp_size * cp_size, but got {world_size} != "
                f"{tp_size} * {pp_size} * {cp_size}"
            )
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} out of range for world_size {world_size}")
        self.world_size, self.rank, self.tp_size, self.pp_size, self.cp_size = (
            world_size,
            rank,
            tp_size,
            pp_size,
            cp_size,
        )

    def to_dict(self):
        # config.json "mapping{world_size,tp_size,pp_size}" (docs/source/legacy/architecture/checkpoint.md)
        return {"world_size": self.world_size, "tp_size": self.tp_size, "pp_size": self.pp_size}
