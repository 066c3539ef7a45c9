"""Medusa's params: the heads a Speculation carries."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from specbuild.speculation import MethodParams, Speculation, StaticTree


@dataclass(frozen=True)
class MedusaHeads(MethodParams):
    """Medusa heads trained on the target (FasterDecoding layout; TensorRT-LLM's --medusa_model_dir)."""

    drafts_tree_nodes: ClassVar[bool] = True
    path: Path
    num_heads: int
    num_layers: int

    def carried_weights(self) -> dict[str, Path]:
        return {"medusa": self.path}

    def full_length(self, spec: Speculation) -> int | None:
        assert isinstance(spec.tree, StaticTree)  # Medusa's tree is its choices
        return len(spec.tree.choices)  # the tree's nodes
