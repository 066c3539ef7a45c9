"""The runtime-neutral description of a recipe's speculation: what is drafted, from what, and how it is verified.

A method module (specbuild/methods/) turns its recipe section into one `Speculation`; each runtime translates
that description into its own dialect in its own package (trtllm-build flags and converters, the reference
engine folder's decoding keys, the Triton parameters of the engine-flavour repository). Frozen: nothing
downstream edits it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from specbuild.engine_facts import SpecMode

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


@dataclass(frozen=True)
class MedusaHeads:
    """Medusa heads trained on the target (FasterDecoding layout; TensorRT-LLM's --medusa_model_dir)."""

    path: Path
    num_heads: int
    num_layers: int


@dataclass(frozen=True)
class EagleHead:
    """An EAGLE-1 draft head over the target's features (TensorRT-LLM's --eagle_model_dir)."""

    path: Path
    num_eagle_layers: int  # drafting steps per verification (the tree depth)
    max_non_leaves_per_layer: int


@dataclass(frozen=True)
class LookaheadWindow:
    """Lookahead decoding's (W, N, G)."""

    window_size: int
    ngram_size: int
    verification_set_size: int


@dataclass(frozen=True)
class DraftModel:
    """A separate draft model with the target's vocabulary; its engine is built beside the target's."""

    path: Path
    num_draft_tokens: int  # drafts proposed per round
    use_draft_logits: bool  # accept by logit ratio (the engines gather generation logits)
    tp_size: int
    fast_logits: bool


@dataclass(frozen=True)
class PromptLookup:
    """Drafts copied from the prompt and output so far, after a match of the last n-gram."""

    num_draft_tokens: int
    max_matching_ngram_size: int


@dataclass(frozen=True)
class Eagle3Head:
    """An EAGLE-3 head (TensorRT-LLM's speculative_model): reads the outputs of several target layers."""

    path: Path
    layers_to_capture: tuple[int, ...] | None  # None: TensorRT-LLM's default {1, L//2 - 1, L - 4}


@dataclass(frozen=True)
class MtpLayers:
    """The target's own multi-token-prediction layers."""

    num_nextn_predict_layers: int


def dynamic_tree_size(top_k: int, depth: int, max_draft_len: int) -> int:
    """Draft tokens of an EAGLE-2 tree, as TensorRT-LLM sizes it: min(K + K*K*(D-1), max_draft_len)."""
    if depth <= 0:
        return 0
    return min(top_k + top_k * top_k * (depth - 1), max_draft_len)


@dataclass(frozen=True)
class Speculation:
    """One recipe's speculation. `mode` is the target engine's speculative-decoding mode; a method the engine
    path does not have (LLM-API only) has mode None. `draft_len_schedule`: the recipe's adaptive schedule as
    sorted (batch size, draft length) pairs (specbuild/standalone/draft_len_schedule.py), None when the length is fixed."""

    method: str
    mode: SpecMode | None
    max_draft_len: int = 0  # draft tokens verified per step (tree nodes); the engine limit
    extra_seq_len: int = 0  # sequence slack beyond max_draft_len (EAGLE: num_eagle_layers)
    tree: StaticTree | DynamicTree | None = None
    medusa: MedusaHeads | None = None
    eagle: EagleHead | None = None
    lookahead: LookaheadWindow | None = None
    draft_model: DraftModel | None = None
    prompt_lookup: PromptLookup | None = None
    eagle3: Eagle3Head | None = None
    mtp: MtpLayers | None = None
    draft_len_schedule: tuple[tuple[int, int], ...] | None = None

    @property
    def speculative(self) -> bool:
        return self.method != "none"

    @property
    def drafted_by_bls(self) -> bool:
        """The Triton BLS runs the loop (draft, then a target call carrying draft_input_ids)."""
        return self.draft_model is not None or self.prompt_lookup is not None

    @property
    def serving_model(self) -> str:
        """The Triton model clients call for speculative generation."""
        return "tensorrt_llm_bls" if self.drafted_by_bls else "ensemble"

    @property
    def weights(self) -> dict[str, Path]:
        """Checkpoint folders the target engine carries beside the model, by name."""
        out: dict[str, Path] = {}
        if self.medusa is not None:
            out["medusa"] = self.medusa.path
        if self.eagle is not None:
            out["eagle"] = self.eagle.path
        if self.eagle3 is not None:
            out["eagle3"] = self.eagle3.path
        return out

    @property
    def num_draft_tokens(self) -> int:
        """Drafts proposed per round by a BLS-driven method (0 otherwise)."""
        source = self.draft_model or self.prompt_lookup
        return source.num_draft_tokens if source is not None else 0


    @property
    def full_draft_length(self) -> int | None:
        """The draft length a draft_len_schedule scales, at full length: drafted tokens per step for chains
        (draft-target and prompt lookup: num_draft_tokens; EAGLE-3: max_draft_len, its chain length or tree
        depth as TensorRT-LLM counts it; MTP: its layers), the tree's node count for token trees (Medusa and
        EAGLE-1: the choices; EAGLE-2: min(K + K*K*(D-1), max_draft_len)). None for lookahead, whose step is its
        (W, N, G) window rather than a draft length."""
        if self.lookahead is not None or not self.speculative:
            return None
        if self.draft_model is not None or self.prompt_lookup is not None:
            return self.num_draft_tokens
        if self.mtp is not None:
            return self.mtp.num_nextn_predict_layers
        if self.eagle3 is not None:
            return self.max_draft_len
        if isinstance(self.tree, StaticTree):
            return len(self.tree.choices)
        if isinstance(self.tree, DynamicTree) and self.eagle is not None:
            return dynamic_tree_size(self.tree.top_k, self.eagle.num_eagle_layers, self.max_draft_len)
        return self.max_draft_len


NO_SPECULATION = Speculation(method="none", mode=SpecMode.NONE)
