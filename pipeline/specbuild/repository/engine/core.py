"""What the engine flavour's repository writers ask of the runtime that serves it: its core model (the `tensorrt_llm`
model's backend and files, the tensor names its backend reads) and the files it adds. `EngineFlavour`
(repository/engine/flavour.py) declares these through this Protocol and each runtime answers them; the writers
(writer.py, configs.py, params.py, plan_info.py) see the runtime as this, so that none of them reaches the flavour
module that calls them."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from specbuild.recipe.schema import Recipe
    from specbuild.speculation import Speculation


class EngineCore(Protocol):
    # Backend of the tensorrt_llm / tensorrt_llm_draft models in config.pbtxt.
    core_backend: str
    # The same, in words for `specbuild plan`.
    core_backend_label: str

    # Files written into `tensorrt_llm/1/` (and the draft's): name -> source path.
    def core_model_files(self) -> dict[str, Path]:
        return {}

    # Whether the installed backend reads tensorrtllm_backend <= 0.19's tensor names (min_length, random_seed); the
    # recipe's triton.legacy_tensor_names overrides it. Default: the current names.
    def legacy_tensor_names(self) -> bool:
        return False

    # Extra files at the repository root: relative path -> text.
    def repository_files(self, recipe: Recipe, spec: Speculation, role: str) -> dict[str, str]:
        return {}
