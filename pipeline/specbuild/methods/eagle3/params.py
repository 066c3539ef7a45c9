"""EAGLE-3's params: the head a Speculation carries."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from specbuild.methods.suffix_automaton.enhancer import SaOverride
from specbuild.speculation import MethodParams


@dataclass(frozen=True)
class Eagle3Head(MethodParams):
    """An EAGLE-3 head (TensorRT-LLM's speculative_model): reads the outputs of several target layers."""

    path: Path
    layers_to_capture: tuple[int, ...] | None  # None: TensorRT-LLM's default {1, L//2 - 1, L - 4}
    sa: SaOverride | None = None  # sa_config: a suffix automaton's long matches override the head's drafts

    def carried_weights(self) -> dict[str, Path]:
        return {"eagle3": self.path}
