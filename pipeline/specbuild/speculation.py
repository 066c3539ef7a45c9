"""The runtime-neutral description of a recipe's speculation: what is drafted, from what, and how it is verified.

A method pack (specbuild/methods/<name>/) turns its recipe section into one `Speculation`, whose `params` is the
pack's own params (a `MethodParams` subclass in the pack: the type is the method; None without speculation). Each
runtime asks the pack of a description for its part (specbuild.methods.pack_for). What every caller may ask whatever
the method (is a draft engine built, which weights travel with the target, what a draft-length schedule scales) is
a member of `MethodParams`, answered by each pack's params. Frozen: nothing downstream edits it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from specbuild.facts.engine_facts import SpecMode

Choices = tuple[tuple[int, ...], ...]


@dataclass(frozen=True)
class StaticTree:
    """A token tree given as paths of top-k ranks (Medusa's medusa_choices, EAGLE-1's eagle_choices)."""

    choices: Choices

    def as_lists(self) -> list[list[int]]:
        return [list(p) for p in self.choices]


@dataclass(frozen=True)
class DynamicTree:
    """EAGLE-2: expand the top_k most likely nodes per level; keep the best by cumulative draft probability."""

    top_k: int


def dynamic_tree_size(top_k: int, depth: int, max_draft_len: int) -> int:
    """Draft tokens of an EAGLE-2 tree, as TensorRT-LLM sizes it: min(K + K*K*(D-1), max_draft_len)."""
    if depth <= 0:
        return 0
    return min(top_k + top_k * top_k * (depth - 1), max_draft_len)


class MethodParams:
    """What any method's params answer (these defaults; each pack's params override what differs). Members
    are class attributes or methods whose names no params field uses (a dataclass would take an inherited class
    attribute of a field's name as the field's default)."""

    # What full_length counts: tree nodes (Medusa, EAGLE-1/2), else draft tokens.
    drafts_tree_nodes: ClassVar[bool] = False
    # Each step drafts a chain or a tree of draft tokens (lookahead runs an n-gram window instead).
    drafts_tokens: ClassVar[bool] = True

    def carried_weights(self) -> dict[str, Path]:
        """Checkpoint folders the target engine carries beside the model, by name."""
        return {}

    def draft_checkpoint(self) -> Path | None:
        """A separate draft model, whose engine is built beside the target's (its own Triton core model)."""
        return None

    def full_length(self, spec: Speculation) -> int | None:
        """The draft length a draft_len_schedule scales, at full length (Speculation.full_draft_length)."""
        return spec.max_draft_len

    def not_lossless(self) -> str | None:
        """Why decoding with these params does not reproduce the target's greedy output, by design (None: it does, as
        every method that verifies its drafts against the target does; the validation's lossless check then says it
        does not apply, and why)."""
        return None

    def accept_depth(self, spec: Speculation) -> int | None:
        """The most drafts one verification step can accept (Speculation.accept_depth): a chain's length, a static
        tree's longest path."""
        if isinstance(spec.tree, StaticTree):
            return max((len(path) for path in spec.tree.choices), default=0)
        return self.full_length(spec)


@dataclass(frozen=True)
class DisableBelow:
    """The recipe's adaptive.disable_below: speculation is switched off for good once the average of the last `window`
    speculating iterations' acceptance rates (accepted / drafted tokens of the batch) drops below
    `acceptance_rate` (TensorRT-LLM's SpeculationGate, acceptance_rate_threshold / acceptance_rate_window_size)."""

    acceptance_rate: float
    window: int


@dataclass(frozen=True)
class Speculation:
    """One recipe's speculation. `params`: the method's own values (None: no speculation). `mode` is the target
    engine's speculative-decoding mode; a method the engine path does not have (LLM-API only) has mode None.
    `draft_len_schedule`: the recipe's adaptive schedule as sorted (batch size, draft length) pairs
    (specbuild/standalone/draft_len_schedule.py), None when the length is fixed. `disable_below`: the recipe's
    acceptance-rate switch (None: speculation stays on)."""

    method: str
    mode: SpecMode | None
    max_draft_len: int = 0  # draft tokens verified per step (tree nodes); the engine limit
    extra_seq_len: int = 0  # sequence slack beyond max_draft_len (EAGLE: num_eagle_layers)
    tree: StaticTree | DynamicTree | None = None
    params: MethodParams | None = None
    draft_len_schedule: tuple[tuple[int, int], ...] | None = None
    disable_below: DisableBelow | None = None

    @property
    def speculative(self) -> bool:
        return self.method != "none"

    @property
    def has_draft_engine(self) -> bool:
        """A separate draft model's engine is built beside the target's."""
        return self.draft_checkpoint is not None

    @property
    def draft_checkpoint(self) -> Path | None:
        """The draft model whose engine is built beside the target's (None: none)."""
        return self.params.draft_checkpoint() if self.params is not None else None

    @property
    def drafts_chain(self) -> bool:
        """Each step drafts a chain of tokens (no token tree, no lookahead window)."""
        return self.params is not None and self.params.drafts_tokens and self.tree is None

    @property
    def weights(self) -> dict[str, Path]:
        """Checkpoint folders the target engine carries beside the model, by name."""
        return self.params.carried_weights() if self.params is not None else {}

    @property
    def full_draft_length(self) -> int | None:
        """The draft length a draft_len_schedule scales, at full length: drafted tokens per step for chains
        (draft-target and prompt lookup: num_draft_tokens; EAGLE-3: max_draft_len, its chain length or tree
        depth as TensorRT-LLM counts it; MTP: its layers), the tree's node count for token trees (Medusa and
        EAGLE-1: the choices; EAGLE-2: min(K + K*K*(D-1), max_draft_len)). None for lookahead, whose step is its
        (W, N, G) window rather than a draft length."""
        return self.params.full_length(self) if self.params is not None else None

    @property
    def accept_depth(self) -> int | None:
        """The most drafts one verification step can accept, the positions per-position acceptance covers: a
        chain's length (EAGLE-3: max_draft_len, as its tree depth too; MTP: its layers), a static tree's longest
        path (Medusa, EAGLE-1), EAGLE-2's layers, lookahead's n-gram size less one; None without speculation."""
        return self.params.accept_depth(self) if self.params is not None else None

    @property
    def full_draft_unit(self) -> str:
        """What full_draft_length counts."""
        return "tree nodes" if self.params is not None and self.params.drafts_tree_nodes else "draft tokens"


NO_SPECULATION = Speculation(method="none", mode=SpecMode.NONE)
