"""Medusa: K extra decoding heads on the target propose a token tree, verified in one target forward.

TensorRT-LLM runs Medusa greedy only (medusa_temperature=0; repository fact sheet §2.1); the reference runtime
samples losslessly (recursive rejection sampling over the tree). Runtime dialects: specbuild/trtllm/, specbuild/
reference/, specbuild/triton/speculation_params.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator, Literal

from pydantic import Field

from specbuild.bounds import PositiveInt32
from specbuild.checkpoint_tensors import MEDUSA, preferred_files, tensor_shapes
from specbuild.engine_facts import SpecMode
from specbuild.methods.base import Finding, Method, Section
from specbuild.methods.common import checkpoint_root, read_hf_config
from specbuild.methods.trees_common import choices_findings, rank_findings
from specbuild.methods.weights import weights_findings
from specbuild.speculation import MedusaHeads, Speculation, StaticTree
from specbuild.trees import MC_SIM_7B_63, tree_depth


class MedusaConfig(Section):
    """Medusa heads trained on the target (FasterDecoding layout, read as --medusa_model_dir)."""

    method: Literal["medusa"]
    checkpoint: Path
    """Folder of the Medusa heads: config.json with medusa_num_heads/medusa_num_layers and the head weights."""
    num_heads: PositiveInt32
    """Number of Medusa heads; must equal the checkpoint's medusa_num_heads (passed explicitly to the converter)."""
    num_layers: PositiveInt32 = 1
    """ResBlock layers per head; must equal the checkpoint's medusa_num_layers."""
    choices: list[list[int]] = Field(default_factory=lambda: [list(p) for p in MC_SIM_7B_63])
    """The static tree as paths of top-k indices; default mc_sim_7b_63 (63 nodes, depth 4)."""
    max_draft_len: PositiveInt32 = 63
    """Engine limit on draft tokens per step (tree nodes); the tree must fit."""


class Medusa(Method):
    name = "medusa"
    Config = MedusaConfig
    summary = "extra heads on the target propose a token tree"

    def describe(self, recipe) -> Speculation:
        spec: MedusaConfig = recipe.speculation
        return Speculation(method=self.name, mode=SpecMode.MEDUSA, max_draft_len=spec.max_draft_len,
                           tree=StaticTree(tuple(tuple(p) for p in spec.choices)),
                           medusa=MedusaHeads(recipe.resolve(spec.checkpoint), spec.num_heads, spec.num_layers))

    def checks(self, recipe) -> Iterator[Finding]:
        spec: MedusaConfig = recipe.speculation
        yield from choices_findings(spec.choices, spec.max_draft_len)
        depth = tree_depth(spec.choices)
        if depth > spec.num_heads:
            yield Finding(
                ("speculation", "choices"),
                f"the tree is {depth} levels deep but there are only {spec.num_heads} Medusa heads "
                f"(head i proposes level i) — remove paths deeper than {spec.num_heads}",
            )

    def file_checks(self, recipe) -> Iterator[Finding]:
        spec: MedusaConfig = recipe.speculation
        cfg = read_hf_config(recipe.resolve(spec.checkpoint))
        if cfg is None:
            yield Finding(("speculation", "checkpoint"), f"no readable config.json in {spec.checkpoint} — "
                          "point it at a Medusa heads folder (config.json with medusa_num_heads)")
            return
        yield from weights_findings(recipe.resolve(spec.checkpoint), spec.checkpoint, MEDUSA)
        target = read_hf_config(recipe.model_dir) or {}
        yield from rank_findings(spec.choices, target.get("vocab_size"))
        yield from self._shape_findings(recipe, target)
        for key, ours, field in (("medusa_num_heads", spec.num_heads, "num_heads"),
                                 ("medusa_num_layers", spec.num_layers, "num_layers")):
            theirs = cfg.get(key)
            if theirs is None:
                continue
            if isinstance(theirs, bool) or not isinstance(theirs, int):
                yield Finding(("speculation", "checkpoint"), f"{spec.checkpoint}/config.json has {key}: {theirs!r}, "
                              "not an integer — fix the heads' config.json")
            elif theirs != ours:
                yield Finding(("speculation", field), f"is {ours} but {spec.checkpoint}/config.json has "
                              f"{key}: {theirs} — set {field}: {theirs}")

    def _shape_findings(self, recipe, target: dict) -> Iterator[Finding]:
        """Head i's projection `i.<num_layers>.weight` is [vocab, hidden] (FasterDecoding/Medusa ResBlocks, then the
        vocabulary projection): both must be the target's."""
        spec: MedusaConfig = recipe.speculation
        folder = recipe.resolve(spec.checkpoint)
        shapes = tensor_shapes(folder, preferred_files(folder, MEDUSA), root=checkpoint_root(folder)) or {}
        projection = shapes.get(f"0.{spec.num_layers}.weight")
        want = (target.get("vocab_size"), target.get("hidden_size"))
        if projection is not None and len(projection) == 2 and all(isinstance(n, int) for n in want) \
                and tuple(projection) != want:
            yield Finding(("speculation", "checkpoint"), f"the Medusa heads map {projection[1]}-wide hidden states "
                          f"onto {projection[0]} tokens (0.{spec.num_layers}.weight) but the target has hidden_size "
                          f"{want[1]} and vocab_size {want[0]} — the heads must be trained on this target")
