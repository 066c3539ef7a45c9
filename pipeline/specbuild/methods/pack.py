"""What a method pack provides: one folder, `specbuild/methods/<name>/`, holds a speculative method whole (the
pattern of pre-commit's languages, `pre_commit/lang_base.py`: one Protocol, one module per language, a registry).

A pack's `__init__.py` is its recipe side: its section, its params, its checks, and its translation into what every
runtime of a flavour writes (the Triton parameters of the engine flavour, model.yaml of the llm-api flavour, the
engine folder's keys). It imports no runtime and no torch. Its runtime-side modules plug into one runtime's framework
and are loaded by that runtime only, through the registry (`specbuild.methods.load`): `decoder.py` (the reference
runtime's `Decoder`), `trtllm.py` (the TensorRT-LLM runtime's converter, build flags and checks) and `trainer.py`
(what `specbuild adapt` trains of the draft); the import layers hold both sides apart (pyproject.toml
[tool.importlinter]).

A member a pack leaves at its default means it has no such part: a runtime or flavour without the pack's part
refuses the method with the reason (the pack's `Refusal`, or the runtime's own words).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Iterator, Protocol, runtime_checkable

if TYPE_CHECKING:
    from pathlib import Path

    from specbuild.findings import Finding
    from specbuild.section import Section
    from specbuild.speculation import MethodParams, Speculation

# The recipe a pack reads (`specbuild.recipe.schema.Recipe`; not imported: the recipe's schema is built from the
# registry of packs, so a pack sees it as a value of its caller's)
Recipe = Any


@dataclass(frozen=True)
class Refusal:
    """Why a runtime or flavour has no such method, and what to use instead (the two halves of a check finding)."""

    why: str
    instead: str


@dataclass(frozen=True)
class Release:
    """What a pack's model.yaml part needs to know of the TensorRT-LLM release it writes for
    (specbuild.repository.llmapi.releases has the table and its sources)."""

    line: str  # "1.0" .. "1.3"
    union: bool  # speculative_config is a pydantic union on decoding_type (the classes' own tags), not from_dict's map
    draft_field: str  # the key that names the draft model or head

    def spelling(self, from_dict: str, union: str) -> str:
        """The decoding_type this release reads: `from_dict`'s map key, or the class's own tag."""
        return union if self.union else from_dict


@dataclass(frozen=True)
class Rehearsed:
    """What the CPU rehearsal of the llm-api flavour serves for a speculative_config: the decoding keys its decoder
    reads, the draft model's folder and the head folders its decoder reads (by name), as written (the rehearsal
    resolves them)."""

    decoding: dict[str, Any]
    draft: str | None = None
    weights: dict[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()  # what the CPU does not follow of it (logged when the model loads)


class Unservable(ValueError):
    """A speculative_config the LLM would refuse at model load (the rehearsal adds the file's path)."""


class ParameterProblem(ValueError):
    """A `tensorrt_llm` parameter the reference core cannot honour (the model refuses to load with it)."""


@runtime_checkable
class MethodPack(Protocol):
    """One speculative method, whole. Packs subclass it and set or override what they have."""

    # The recipe's `speculation.method` value.
    name: ClassVar[str]
    # What the method does, in one line.
    summary: ClassVar[str]
    # The recipe section: a specbuild.section.Section whose `method` field is Literal[name].
    Config: ClassVar[type[Section]]
    # The params its Speculation carries (the type the registry keys it by); None: no speculation.
    Params: ClassVar[type[MethodParams] | None]

    # The runtime-neutral description of a recipe with this section.
    def describe(self, recipe: Recipe) -> Speculation:
        raise NotImplementedError

    # Rules of the section that hold on every runtime (located findings).
    def checks(self, recipe: Recipe) -> Iterator[Finding]:
        return iter(())

    # Rules that read the checkpoints the section names (run when they are readable).
    def file_checks(self, recipe: Recipe) -> Iterator[Finding]:
        return iter(())

    # --- the engine flavour: engine folders and the ensemble/BLS repository (both runtimes) ---------------------
    # The pretrained_config keys of a speculative target engine (TensorRT-LLM's converters write them).
    def pretrained_config(self, spec: Speculation) -> dict[str, Any]:
        return {}

    # The `tensorrt_llm` model's decoding_mode when the engine drafts; None: the core model does not draft.
    decoding_mode: ClassVar[str | None] = None

    # The `tensorrt_llm` model's method parameters after decoding_mode.
    def core_parameters(self, spec: Speculation) -> dict[str, str]:
        return {}

    # How our `tensorrt_llm_bls` drafts (its parameters); None: the BLS does not draft this method.
    def bls_parameters(self, spec: Speculation) -> dict[str, str] | None:
        return None

    # The keys an engine folder records under specbuild.decoding (the reference decoder reads them).
    def decoding(self, spec: Speculation) -> dict[str, Any]:
        return {}

    # The same keys read back from the `tensorrt_llm` model's parameters (`get*` read one; None: unset).
    def decoding_overrides(
        self,
        get: Callable[[str], str | None],
        get_bool: Callable[[str], bool | None],
        get_int: Callable[[str], int | None],
    ) -> dict[str, Any]:
        return {}

    # --- the llm-api flavour: model.yaml (both runtimes) ---------------------------------------------------------
    # Every decoding_type spelling a TensorRT-LLM release gives the method (the rehearsal reads each back).
    decoding_types: ClassVar[tuple[str, ...]] = ()

    # model.yaml's speculative_config for a release (decoding_type first), or why the LLM API has no such method.
    def speculative_config(self, spec: Speculation, release: Release, path: Callable[[Path], str]) -> dict | Refusal:
        return Refusal("the LLM API has no such decoding config", "flavour: engine")

    # What the LLM API (release `recipe.llm_api.release`) cannot honour of the section.
    def llmapi_checks(self, recipe: Recipe, spec: Speculation) -> Iterator[Finding]:
        return iter(())

    # The drafter is a model of its own (NGram, Draft_Target): it follows a draft_len_schedule from PR #8194 on.
    two_model_drafter: ClassVar[bool] = False

    # TensorRT-LLM's examples run the method with the overlap scheduler off.
    overlap_off: ClassVar[bool] = False

    # TensorRT-LLM's decoding config class, as the CPU rehearsal validates it (pydantic, unknown keys refused).
    rehearsal_config: ClassVar[type | None] = None

    # What the rehearsal serves for a validated config with draft length `k` (raises Unservable).
    def rehearse(self, config: Any, k: int) -> Rehearsed:
        raise Unservable("the reference runtime does not rehearse it")

    # The speculative_config TensorRT-LLM serves in place of a validated one, chosen from the LLM's max_batch_size
    # when the executor is made (AUTO: its heuristic's NGram config, tensorrt_llm/_torch/pyexecutor/
    # py_executor_creator.py@bab0f2e); the rehearsal serves that one. None: this one is served.
    def served_in_place(self, config: Any, max_batch_size: int) -> dict[str, Any] | None:
        return None

    # What runs in this method's place, for the report to name (AUTO: the NGram config TensorRT-LLM's heuristic
    # picks); None: the method itself runs.
    def runs(self, spec: Speculation) -> str | None:
        return None

    # --- runtime-side parts, loaded lazily by their runtime (specbuild.methods.load) -------------------------------
    # The reference runtime's Decoder, "module:Class" inside the pack; None: the reference runtime refuses it.
    decoder: ClassVar[str | None] = None
    # Why the reference runtime has no decoder for it (with `decoder` None).
    reference_refusal: ClassVar[Refusal | None] = None
    # The TensorRT-LLM runtime's part, "module:object" inside the pack (specbuild.trtllm.method_part.TrtllmPart);
    # None: the plain model class converts the target and nothing more is asked.
    trtllm: ClassVar[str | None] = None
    # adapt's trainer of the method's draft (specbuild.adapt.heads.base.HeadTrainer), "module:object" inside the
    # pack; None: adapt refuses the method, saying why (`untrained`).
    trainer: ClassVar[str | None] = None
    # Why adapt has nothing to train (with `trainer` None).
    untrained: ClassVar[str] = "its drafts come from no trained weights"
