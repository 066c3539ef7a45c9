"""What adapt needs from each kind of draft to train it: one small protocol, one module per method pack that has a
trained draft (specbuild/methods/<name>/trainer.py), found by the speculation params type
(specbuild.adapt.heads.trainer_for). Each module reuses the zoo's objective for its kind (zoo/distill.py,
zoo/distill_eagle3.py), its greedy replay (zoo/evaluate.py) and the head's own loader and saver (specbuild.heads), so
that a head adapt writes is the layout the zoo writes and every runtime loads. A module holds nothing of adapt's loop."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Protocol

import torch

from specbuild.adapt.rows import Rows
from specbuild.speculation import Speculation

LossFn = Callable[[torch.Tensor], torch.Tensor]  # teacher row indices -> loss


class HeadTrainer(Protocol):
    kind: str  # what the report calls it: "EAGLE-1/2 head"
    layout: str  # the upstream layout it is saved in
    learning_rate: float  # default peak learning rate when fine-tuning from the current head
    batch_size: int  # default teacher rows per step

    def captured_layers(self, spec: Speculation, target) -> tuple[int, ...] | None:
        """The target layers whose outputs the head reads besides the final hidden state (EAGLE-3), else None."""
        ...

    def load(self, spec: Speculation, target) -> torch.nn.Module:
        """The current head (or draft model), float32, from the folder the speculation names."""
        ...

    def prepare(self, module: torch.nn.Module, rows: Rows, target, seed: int) -> dict | None:
        """Adjust the module to the training rows before training, where the kind needs it (EAGLE-3: its draft
        vocabulary); rows are on the training device. Returns what it changed, for the report (None: nothing)."""
        ...

    def loss(self, module: torch.nn.Module, rows: Rows, target, seed: int, precision: str) -> LossFn:
        """The kind's objective on a batch of teacher rows (the zoo's)."""
        ...

    def depth(self, spec: Speculation) -> int:
        """Drafts per step of the greedy chain the dev part is measured with."""
        ...

    def replay(self, module: torch.nn.Module, rows: Rows, index: int, target, depth: int) -> tuple[int, int]:
        """(accepted drafts, verification steps) of a greedy chain over row `index`'s answer (zoo/evaluate.py)."""
        ...

    def save(self, module: torch.nn.Module, folder: Path, old: Path) -> None:
        """Write the head into `folder` in its upstream layout, at the dtype of the old head's weights."""
        ...


def stored_dtype(tensors: dict) -> torch.dtype:
    """The floating dtype most of a checkpoint's tensors are stored in (what a saved head keeps)."""
    counts: dict[torch.dtype, int] = {}
    for t in tensors.values():
        if t.is_floating_point():
            counts[t.dtype] = counts.get(t.dtype, 0) + t.numel()
    return max(counts, key=counts.get) if counts else torch.float16
