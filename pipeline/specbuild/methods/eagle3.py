"""EAGLE-3: a draft layer over features fused from several target layers, with its own (smaller) vocabulary,
drafts a chain of max_draft_len tokens per step (TensorRT-LLM's one-model Eagle3 worker; LLM-API fact sheet §6).

The LLM-API flavour only: TensorRT-LLM's engine path has no EAGLE-3 (it interprets EAGLE-1/2 heads), and its
PyTorch backend has no EAGLE-1/2 (llmapi fact sheet §4.6). The head is a Hugging Face-style folder in the layout
TensorRT-LLM loads (§6.1-6.3): config.json with draft_vocab_size, fc / midlayer.* / norm / lm_head / d2t.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator, Literal

from specbuild.bounds import PositiveInt32
from specbuild.checkpoint_tensors import EAGLE3, preferred_files, tensor_shapes
from specbuild.methods.base import Finding, Method, Section
from specbuild.methods.common import checkpoint_root, read_hf_config
from specbuild.methods.weights import weights_findings
from specbuild.speculation import DynamicTree, Eagle3Head, Speculation

MIN_LAYERS_FOR_DEFAULT_CAPTURE = 6  # "Not enough hidden layers for default EAGLE3 capture" when L <= 5 (§6.5)


def default_layers_to_capture(num_layers: int) -> tuple[int, ...]:
    """TensorRT-LLM's default capture set {1, L//2 - 1, L - 4} (Eagle3OneModelSpecMetadata; llmapi sheet §6.5)."""
    return tuple(sorted({1, num_layers // 2 - 1, num_layers - 4}))


class Eagle3Tree(Section):
    """Dynamic tree (later TensorRT-LLM releases' use_dynamic_tree): expand top_k candidates per level."""

    top_k: PositiveInt32
    """dynamic_tree_max_topK: candidates expanded per level."""


class Eagle3Config(Section):
    """An EAGLE-3 draft head (TensorRT-LLM's speculative_model) drafting a chain, or a dynamic tree."""

    method: Literal["eagle3"]
    checkpoint: Path
    """Folder of the EAGLE-3 head: config.json (draft_vocab_size, ...) and fc, midlayer.*, norm, lm_head, d2t."""
    max_draft_len: PositiveInt32 = 3
    """Draft tokens per step (the chain length K); the target verifies K + 1 tokens."""
    layers_to_capture: list[int] | None = None
    """Target decoder layers whose outputs feed the head (eagle3_layers_to_capture); default {1, L//2-1, L-4}."""
    dynamic_tree: Eagle3Tree | None = None
    """Draft a dynamic tree instead of a chain (reference runtime; TensorRT-LLM <= 1.2 drafts chains only)."""


class Eagle3(Method):
    name = "eagle3"
    Config = Eagle3Config
    summary = "a draft layer over fused target features drafts a chain in its own vocabulary"

    def describe(self, recipe) -> Speculation:
        spec: Eagle3Config = recipe.speculation
        head = Eagle3Head(recipe.resolve(spec.checkpoint),
                          tuple(spec.layers_to_capture) if spec.layers_to_capture is not None else None)
        tree = DynamicTree(spec.dynamic_tree.top_k) if spec.dynamic_tree is not None else None
        return Speculation(method=self.name, mode=None, max_draft_len=spec.max_draft_len, tree=tree, eagle3=head)

    def checks(self, recipe) -> Iterator[Finding]:
        spec: Eagle3Config = recipe.speculation
        layers = spec.layers_to_capture
        if layers is not None:
            if not layers:
                yield Finding(("speculation", "layers_to_capture"), "is empty — list the target layers to capture "
                              "(0-based), or remove it for TensorRT-LLM's default {1, L//2-1, L-4}")
            elif len(set(layers)) != len(layers):
                yield Finding(("speculation", "layers_to_capture"), "lists a layer twice — give each layer once")
            elif any(i < 0 for i in layers):
                yield Finding(("speculation", "layers_to_capture"), "has a negative layer; -1 (the final output) is "
                              "for Mistral-Large-3 drafts only — use 0-based decoder layer indices")

    def file_checks(self, recipe) -> Iterator[Finding]:
        spec: Eagle3Config = recipe.speculation
        head, target = read_hf_config(recipe.resolve(spec.checkpoint)), read_hf_config(recipe.model_dir)
        if head is None:
            yield Finding(("speculation", "checkpoint"), f"no readable config.json in {spec.checkpoint} — point it at "
                          "an EAGLE-3 head folder (config.json with draft_vocab_size, and its weights)")
            return
        yield from weights_findings(recipe.resolve(spec.checkpoint), spec.checkpoint, EAGLE3)
        if target is None:
            return
        for key in ("vocab_size",):
            if key in head and head[key] != target.get(key):
                yield Finding(("speculation", "checkpoint"), f"the EAGLE-3 head has {key} {head[key]} but the target "
                              f"has {target.get(key)} — the head must be trained on this target")
        width = head.get("target_hidden_size", head.get("hidden_size"))
        if width is not None and width != target.get("hidden_size"):
            yield Finding(("speculation", "checkpoint"), f"the EAGLE-3 head reads target features of width {width} "
                          f"but the target's hidden_size is {target.get('hidden_size')} — use a head trained on "
                          "this target")
        n_layers = target.get("num_hidden_layers")
        if not isinstance(n_layers, int):
            return
        if spec.layers_to_capture is None and n_layers < MIN_LAYERS_FOR_DEFAULT_CAPTURE:
            yield Finding(("speculation", "checkpoint"), f"the target has {n_layers} decoder layers; TensorRT-LLM's "
                          "default capture set needs more than 5 — give speculation.layers_to_capture")
        elif spec.layers_to_capture is not None and max(spec.layers_to_capture, default=0) >= n_layers:
            yield Finding(("speculation", "layers_to_capture"), f"names layer {max(spec.layers_to_capture)} but the "
                          f"target has {n_layers} decoder layers (0 to {n_layers - 1})")
        else:
            yield from self._capture_findings(recipe, head, target.get("hidden_size"), n_layers)

    def _capture_findings(self, recipe, head: dict, width, n_layers: int) -> Iterator[Finding]:
        """The head's fc fuses as many target layers as are captured: fc.weight is [hidden, captured x width]
        (no fc: one layer; TensorRT-LLM Eagle3 `num_capture_layers`)."""
        spec: Eagle3Config = recipe.speculation
        folder = recipe.resolve(spec.checkpoint)
        shapes = tensor_shapes(folder, preferred_files(folder, EAGLE3), root=checkpoint_root(folder))
        if not shapes or not isinstance(width, int) or width < 1:
            return
        fc = shapes.get("fc.weight")
        if (fc is None and "fc.weight" in shapes) or (fc is not None and (len(fc) != 2 or fc[1] % width)):
            return  # a shard index gives no shapes; an fc the loader refuses with its own message
        fused = fc[1] // width if fc is not None else 1
        layers = spec.layers_to_capture if spec.layers_to_capture is not None else default_layers_to_capture(n_layers)
        if fused != len(layers):
            named = (head.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
            hint = f" (its config.json names {named})" if isinstance(named, list) and len(named) == fused else ""
            field = ("speculation", "layers_to_capture") if spec.layers_to_capture is not None else \
                ("speculation", "checkpoint")
            given = "speculation.layers_to_capture" if spec.layers_to_capture is not None else \
                "TensorRT-LLM's default capture set"
            yield Finding(field, f"the head fuses {fused} target layer(s) (fc.weight {list(fc) if fc else 'absent'}) "
                          f"but {given} has {len(layers)} ({list(layers)}) — capture the {fused} layer(s) the head was "
                          f"trained on{hint}")
