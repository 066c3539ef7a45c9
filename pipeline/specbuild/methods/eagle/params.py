"""EAGLE-1/2's params: the head a Speculation carries."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from specbuild.speculation import DynamicTree, MethodParams, Speculation, StaticTree, dynamic_tree_size


@dataclass(frozen=True)
class EagleHead(MethodParams):
    """An EAGLE-1 draft head over the target's features (TensorRT-LLM's --eagle_model_dir)."""

    drafts_tree_nodes: ClassVar[bool] = True
    path: Path
    num_eagle_layers: int  # drafting steps per verification (the tree depth)
    max_non_leaves_per_layer: int

    def carried_weights(self) -> dict[str, Path]:
        return {"eagle": self.path}

    def full_length(self, spec: Speculation) -> int | None:
        if isinstance(spec.tree, StaticTree):
            return len(spec.tree.choices)  # EAGLE-1: the choices
        assert isinstance(spec.tree, DynamicTree)
        return dynamic_tree_size(spec.tree.top_k, self.num_eagle_layers, spec.max_draft_len)  # EAGLE-2

    def accept_depth(self, spec: Speculation) -> int | None:
        if isinstance(spec.tree, DynamicTree):
            return self.num_eagle_layers  # EAGLE-2: one level per drafting step
        return super().accept_depth(spec)
