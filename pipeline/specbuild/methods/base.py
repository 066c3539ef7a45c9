"""What every speculative method module provides. Method knowledge lives in one module per method."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Iterator

from pydantic import BaseModel, ConfigDict

if TYPE_CHECKING:
    from specbuild.recipe.schema import Recipe

Path_ = tuple[str | int, ...]


class Section(BaseModel):
    """A recipe section: unknown keys are errors (the loader adds a "did you mean")."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)


@dataclass(frozen=True)
class Finding:
    """A problem found by a recipe check, located by its field path, e.g. ("speculation", "choices", 3)."""

    path: Path_
    message: str
    also: tuple[Path_, ...] = ()  # where to point instead when `path` is not written in the recipe (a default)


@dataclass(frozen=True)
class Converter:
    """How a Hugging Face checkpoint becomes a TensorRT-LLM checkpoint (engine fact sheet §2)."""

    via: str  # "wheel": the model class in the tensorrt_llm wheel; "script": an examples/ convert_checkpoint.py
    model_class: str  # e.g. "LLaMAForCausalLM" (tensorrt_llm.models)
    kwargs: dict[str, Any] = field(default_factory=dict)  # method-specific from_hugging_face arguments
    script: str | None = None  # path inside a TensorRT-LLM examples/ tree, when via == "script"
    script_args: list[str] = field(default_factory=list)  # method-specific script flags
    reason: str = ""  # why this path was taken (printed in the plan)


class Method:
    """Base for the per-method modules. Subclasses set the class attributes and override what differs."""

    name: ClassVar[str]
    Config: ClassVar[type[Section]]
    trtllm_mode: ClassVar[str | None] = None  # `trtllm-build --speculative_decoding_mode` value
    mode_flag: ClassVar[int] = 1  # SpeculativeDecodingMode IntFlag value stored in the engine config.json
    decoding_mode: ClassVar[str | None] = None  # tensorrt_llm config.pbtxt `decoding_mode` (None: leave unset)
    needs_draft_engine: ClassVar[bool] = False
    serving_model: ClassVar[str] = "ensemble"  # the Triton model clients call for speculative generation
    greedy_only_on: ClassVar[tuple[str, ...]] = ()  # runtimes that refuse sampling (temperature > 0) with it
    summary: ClassVar[str] = ""

    @property
    def speculative(self) -> bool:
        return self.trtllm_mode is not None

    def max_draft_len(self, spec: Any) -> int:
        return 0

    def extra_len(self, spec: Any) -> int:
        """Tokens trtllm-build adds to max_seq_len beyond max_draft_len (EAGLE: num_eagle_layers)."""
        return 0

    def checks(self, recipe: Recipe) -> Iterator[Finding]:
        return iter(())

    def file_checks(self, recipe: Recipe) -> Iterator[Finding]:
        """Checks that read the checkpoints named by the recipe (skipped when they are unreadable)."""
        return iter(())

    def triton_parameters(self, recipe: Recipe) -> dict[str, str]:
        """Method parameters of the `tensorrt_llm` model's config.pbtxt (repository fact sheet §2.1)."""
        return {}

    def bls_parameters(self, recipe: Recipe) -> dict[str, str]:
        """tensorrt_llm_bls parameters of a BLS-driven method: how the BLS drafts (repository fact sheet §4)."""
        return {}

    def reference_decoding(self, recipe: Recipe) -> dict[str, Any]:
        """Runtime defaults the reference engine folder records under specbuild.decoding."""
        return {}

    def speculative_dirs(self, recipe: Recipe) -> dict[str, Any]:
        """Extra checkpoint folders the target engine needs (e.g. {"medusa": Path}); resolved paths."""
        return {}

    def pretrained_extra(self, recipe: Recipe) -> dict[str, Any]:
        """Method keys of the engine's pretrained_config (engine fact sheet §3.1)."""
        return {}

    def converter(self, recipe: Recipe, examples_dir: str | None) -> Converter:
        from specbuild.methods.common import plain_converter

        return plain_converter(recipe)

    def build_flags(self, recipe: Recipe) -> dict[str, str | None]:
        """Method flags for the target's trtllm-build (None value = store_true flag)."""
        if not self.speculative:
            return {}
        return {"--speculative_decoding_mode": self.trtllm_mode, "--max_draft_len": str(self.max_draft_len(recipe.speculation))}

    def draft_build_flags(self, recipe: Recipe) -> dict[str, str | None]:
        return {}
