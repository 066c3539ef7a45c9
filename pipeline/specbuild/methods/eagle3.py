"""EAGLE-3: a draft layer over features fused from several target layers, with its own (smaller) vocabulary,
drafts a chain of max_draft_len tokens per step (TensorRT-LLM's one-model Eagle3 worker,
tensorrt_llm/_torch/speculative/eagle3.py).

The LLM-API flavour only: TensorRT-LLM's engine path has no EAGLE-3 (it interprets EAGLE-1/2 heads), and its
PyTorch backend has no EAGLE-1/2 (tensorrt_llm/llmapi/llm_args.py). The head is a Hugging Face-style folder in the
layout TensorRT-LLM loads (tensorrt_llm/_torch/models/modeling_speculative.py): config.json with draft_vocab_size, fc /
midlayer.* / norm / lm_head / d2t.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator, Literal

from specbuild.facts.bounds import PositiveInt32
from specbuild.checkpoints.checkpoint_tensors import EAGLE3, preferred_files, tensor_shapes
from specbuild.methods import preflight
from specbuild.findings import Finding
from specbuild.methods.base import Method
from specbuild.section import Section
from specbuild.checkpoints.checkpoint_files import checkpoint_root, read_hf_config
from specbuild.methods.preflight import SHARED, Fact, HeadRecord, Rope, config_int
from specbuild.methods.weights import weights_findings
from specbuild.speculation import DynamicTree, Eagle3Head, Speculation

MIN_LAYERS_FOR_DEFAULT_CAPTURE = 6  # "Not enough hidden layers for default EAGLE3 capture" when L <= 5


def default_layers_to_capture(num_layers: int) -> tuple[int, ...]:
    """TensorRT-LLM's default capture set {1, L//2 - 1, L - 4} (Eagle3OneModelSpecMetadata,
    tensorrt_llm/_torch/speculative/eagle3.py)."""
    return tuple(sorted({1, num_layers // 2 - 1, num_layers - 4}))


HEAD_FACTS = (
    preflight.ARCHITECTURE,
    preflight.TARGET_NAME,
    preflight.HIDDEN,
    preflight.VOCAB,
    preflight.DRAFT_VOCAB,
    preflight.LM_HEAD,
    preflight.POSITIONS,
    preflight.ROPE,
    preflight.DTYPE,
    preflight.QUANTIZATION,
)


def head_record(folder: Path, cfg: dict) -> HeadRecord:
    """What an EAGLE-3 head records about its target (tensorrt_llm/_torch/models/modeling_speculative.py): the width of
    the target features it fuses (target_hidden_size, else hidden_size; fc.weight [H_d, n x H_t]), the target vocabulary
    (vocab_size, t2d [V], embed_tokens [V, H_d] when it has one), its own vocabulary (draft_vocab_size, d2t [V_d],
    lm_head [V_d, H_d]; no lm_head: the target's is used), and its training positions, rope, dtype and quantization. A
    `speculators` head (vllm-project/speculators `config.py`: speculators_model_type, the draft layer's config in
    transformer_layer_config, speculators_config.verifier {name_or_path, architectures}) records its target by name and
    architecture too."""
    layer = cfg.get("transformer_layer_config")
    layer = layer if isinstance(layer, dict) else {}
    file = "config.json transformer_layer_config" if layer else "config.json"
    shape = {**cfg, **layer}
    verifier = (
        (cfg.get("speculators_config") or {}).get("verifier")
        if isinstance(cfg.get("speculators_config"), dict)
        else None
    )
    verifier = verifier if isinstance(verifier, dict) else {}
    where = "config.json speculators_config.verifier"
    architectures = verifier.get("architectures")
    name = verifier.get("name_or_path")
    own = config_int(shape, "hidden_size", file)
    record = dict(
        label="the EAGLE-3 head",
        facts=HEAD_FACTS,
        architectures=Fact(architectures, f"{where}.architectures")
        if isinstance(architectures, list) and architectures and all(isinstance(a, str) for a in architectures)
        else None,
        target_name=Fact(name, f"{where}.name_or_path") if isinstance(name, str) and name else None,
        hidden=tuple(f for f in (config_int(cfg, "target_hidden_size") or own,) if f is not None),
        own_hidden=own,
        vocab=tuple(f for f in (config_int(shape, "vocab_size", file),) if f is not None),
        draft_vocab=config_int(cfg, "draft_vocab_size"),
        **preflight.head_config_facts(shape, folder, file),
    )
    record["rope"] = _scaling_only(record["rope"])
    shapes = tensor_shapes(folder, preferred_files(folder, EAGLE3), root=checkpoint_root(folder))
    if shapes:
        record.update(_tensor_facts(shapes, record))
    return HeadRecord(**record)


def _scaling_only(rope: Fact | None) -> Fact | None:
    """The rope_theta an EAGLE-3 config writes is its own layer's, not its target's: EAGLE's trainer hard-codes base
    10000 whatever the config says (SafeAILab/EAGLE eagle/traineagle3/cnets.py@cb7e084) and speculators' converter
    writes 10000 for every head (`src/speculators/convert/eagle/eagle3_converter.py`). Only a rope scaling it writes is
    compared."""
    if rope is None or rope.value.type is None:
        return None
    return Fact(Rope(rope.value.type, rope.value.factor, None), rope.source.replace(" / rope_theta", ""))


def _tensor_facts(shapes: dict, record: dict) -> dict:
    """What the head's tensors say (a shard index names them without shapes: presence only)."""
    out = {}

    def length(name: str) -> Fact | None:
        if name not in shapes:
            return Fact(None, f"the head's weights hold no {name}")
        shape = shapes[name]
        return Fact(shape[0], f"{name} {list(shape)}") if shape and len(shape) == 1 else None

    out["d2t"], out["t2d"] = length("d2t"), length("t2d")
    fc = shapes.get("fc.weight")
    if fc is not None and len(fc) == 2:
        out["feature_inputs"] = Fact(fc[1], f"fc.weight {list(fc)}")
    lm_head = shapes.get("lm_head.weight", ())
    if "lm_head.weight" not in shapes:
        out["lm_head"] = Fact(SHARED, "the head's weights hold no lm_head.weight")
    elif lm_head and len(lm_head) == 2:
        out["lm_head"] = Fact(tuple(lm_head), f"lm_head.weight {list(lm_head)}")
    embed = shapes.get("embed_tokens.weight")
    if embed is not None and len(embed) == 2:
        out["vocab"] = record["vocab"] + (Fact(embed[0], f"embed_tokens.weight {list(embed)}"),)
    return out


class Eagle3Tree(Section):
    """Dynamic tree (later TensorRT-LLM releases' use_dynamic_tree): expand top_k candidates per level."""

    top_k: PositiveInt32
    """dynamic_tree_max_topK: candidates expanded per level."""


class Eagle3Config(Section):
    """An EAGLE-3 draft head (TensorRT-LLM's speculative_model) drafting a chain, or a dynamic tree."""

    method: Literal["eagle3"]
    checkpoint: Path
    """Folder (or model id[@revision]) of the EAGLE-3 head: config.json (draft_vocab_size, ...) and fc, midlayer.*,
    norm, lm_head, d2t."""
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
        head = Eagle3Head(
            recipe.checkpoint_dir(spec.checkpoint),
            tuple(spec.layers_to_capture) if spec.layers_to_capture is not None else None,
        )
        tree = DynamicTree(spec.dynamic_tree.top_k) if spec.dynamic_tree is not None else None
        return Speculation(method=self.name, mode=None, max_draft_len=spec.max_draft_len, tree=tree, params=head)

    def checks(self, recipe) -> Iterator[Finding]:
        spec: Eagle3Config = recipe.speculation
        layers = spec.layers_to_capture
        if layers is not None:
            if not layers:
                yield Finding(
                    ("speculation", "layers_to_capture"),
                    "is empty — list the target layers to capture "
                    "(0-based), or remove it for TensorRT-LLM's default {1, L//2-1, L-4}",
                )
            elif len(set(layers)) != len(layers):
                yield Finding(("speculation", "layers_to_capture"), "lists a layer twice — give each layer once")
            elif any(i < 0 for i in layers):
                yield Finding(
                    ("speculation", "layers_to_capture"),
                    "has a negative layer; -1 (the final output) is "
                    "for Mistral-Large-3 drafts only — use 0-based decoder layer indices",
                )

    def file_checks(self, recipe) -> Iterator[Finding]:
        spec: Eagle3Config = recipe.speculation
        head, target = read_hf_config(recipe.checkpoint_dir(spec.checkpoint)), read_hf_config(recipe.model_dir)
        if head is None:
            yield Finding(
                ("speculation", "checkpoint"),
                f"no readable config.json in {spec.checkpoint} — point it at "
                "an EAGLE-3 head folder (config.json with draft_vocab_size, and its weights)",
            )
            return
        layout = list(weights_findings(recipe.checkpoint_dir(spec.checkpoint), spec.checkpoint, EAGLE3))
        yield from layout
        if target is None or layout:  # a folder of another kind is named as such, not compared as a head
            return
        paired = list(preflight.findings(recipe, head_record(recipe.checkpoint_dir(spec.checkpoint), head)))
        yield from paired
        if any(not f.warning for f in paired):
            return
        n_layers = target.get("num_hidden_layers")
        if not isinstance(n_layers, int):
            return
        if spec.layers_to_capture is None and n_layers < MIN_LAYERS_FOR_DEFAULT_CAPTURE:
            yield Finding(
                ("speculation", "checkpoint"),
                f"the target has {n_layers} decoder layers; TensorRT-LLM's "
                "default capture set needs more than 5 — give speculation.layers_to_capture",
            )
        elif spec.layers_to_capture is not None and max(spec.layers_to_capture, default=0) >= n_layers:
            yield Finding(
                ("speculation", "layers_to_capture"),
                f"names layer {max(spec.layers_to_capture)} but the "
                f"target has {n_layers} decoder layers (0 to {n_layers - 1})",
            )
        else:
            yield from self._capture_findings(recipe, head, target.get("hidden_size"), n_layers)

    def _capture_findings(self, recipe, head: dict, width, n_layers: int) -> Iterator[Finding]:
        """The head's fc fuses as many target layers as are captured: fc.weight is [hidden, captured x width]
        (no fc: one layer; TensorRT-LLM Eagle3 `num_capture_layers`)."""
        spec: Eagle3Config = recipe.speculation
        folder = recipe.checkpoint_dir(spec.checkpoint)
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
            field = (
                ("speculation", "layers_to_capture")
                if spec.layers_to_capture is not None
                else ("speculation", "checkpoint")
            )
            given = (
                "speculation.layers_to_capture"
                if spec.layers_to_capture is not None
                else "TensorRT-LLM's default capture set"
            )
            yield Finding(
                field,
                f"the head fuses {fused} target layer(s) (fc.weight {list(fc) if fc else 'absent'}) "
                f"but {given} has {len(layers)} ({list(layers)}) — capture the {fused} layer(s) the head was "
                f"trained on{hint}",
            )
