"""EAGLE-3: a draft layer over features fused from several target layers, with its own (smaller) vocabulary,
drafts a chain of max_draft_len tokens per step (TensorRT-LLM's one-model Eagle3 worker,
tensorrt_llm/_torch/speculative/eagle3.py).

The LLM-API flavour only: TensorRT-LLM's engine path has no EAGLE-3 (it interprets EAGLE-1/2 heads), and its
PyTorch backend has no EAGLE-1/2 (tensorrt_llm/llmapi/llm_args.py). The head is a Hugging Face-style folder in the
layout TensorRT-LLM loads (tensorrt_llm/_torch/models/modeling_speculative.py): config.json with draft_vocab_size, fc /
midlayer.* / norm / lm_head / d2t. The pack: this section, params.py, model.yaml's speculative_config per release and
its reading by the CPU rehearsal here, preflight.py (the head against its target), decoder.py (reference),
trtllm.py (TensorRT-LLM's llm-api refusals).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator, Literal

from specbuild.facts.bounds import PositiveInt32
from specbuild.checkpoints.checkpoint_tensors import EAGLE3, preferred_files, tensor_shapes
from specbuild.methods import preflight
from specbuild.findings import Finding
from specbuild.methods.eagle3.params import Eagle3Head
from specbuild.methods.eagle3.head_record import head_record
from specbuild.methods.llm_args import WithDraftModel
from specbuild.methods.pack import MethodPack, Refusal, Rehearsed, Unservable
from specbuild.methods.suffix_automaton.enhancer import SAEnhancerConfig, SaEnhancerSection, SaOverride, sa_decoding
from specbuild.methods.suffix_automaton.enhancer import sa_model_yaml
from specbuild.section import Section
from specbuild.checkpoints.checkpoint_files import checkpoint_root, read_hf_config
from specbuild.methods.weights import weights_findings
from specbuild.speculation import DynamicTree, Speculation

MIN_LAYERS_FOR_DEFAULT_CAPTURE = 6  # "Not enough hidden layers for default EAGLE3 capture" when L <= 5


def default_layers_to_capture(num_layers: int) -> tuple[int, ...]:
    """TensorRT-LLM's default capture set {1, L//2 - 1, L - 4} (Eagle3OneModelSpecMetadata,
    tensorrt_llm/_torch/speculative/eagle3.py)."""
    return tuple(sorted({1, num_layers // 2 - 1, num_layers - 4}))


# eagle3_layers_to_capture exists from 1.1 (llm_args.py)
RELEASES_WITH_LAYER_CHOICE = ("1.1", "1.2", "1.3")
# eagle3_one_model: absent from the 1.3.0rc27 signature
RELEASES_WITH_ONE_MODEL_FIELD = ("1.0", "1.1", "1.2")
# use_dynamic_tree drafting arrived after 1.2 (TensorRT-LLM docs/source/features/speculative-decoding.md@04c8822)
RELEASES_WITH_DYNAMIC_TREE = ("1.3",)


class Eagle3DecodingConfig(WithDraftModel):
    """Eagle3DecodingConfig (llm_args.py) as the CPU rehearsal reads it: the one-model chain worker, dynamic trees
    after 1.2."""

    decoding_type: Literal["Eagle3", "Eagle"]
    eagle3_one_model: bool = True
    eagle3_layers_to_capture: list[int] | None = None
    eagle3_model_arch: Literal["llama3"] = "llama3"
    use_dynamic_tree: bool = False
    dynamic_tree_max_topK: PositiveInt32 | None = None  # noqa: N815 (TensorRT-LLM's field name)
    max_total_draft_tokens: PositiveInt32 | None = None
    sa_config: SAEnhancerConfig | None = None


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
    sa_config: SaEnhancerSection | None = None
    """A suffix automaton beside the head (TensorRT-LLM 1.3's sa_config, beta): a match of at least `threshold`
    tokens replaces the head's drafts for that step. Chains only."""


class Eagle3Pack(MethodPack):
    name = "eagle3"
    Config = Eagle3Config
    Params = Eagle3Head
    summary = "a draft layer over fused target features drafts a chain in its own vocabulary"
    decoding_types = ("Eagle", "Eagle3")  # 1.0-1.2's from_dict key, the union's tag
    rehearsal_config = Eagle3DecodingConfig
    decoder = "decoder:Eagle3Decoder"
    trtllm = "trtllm:PART"
    trainer = "trainer:TRAINER"

    def describe(self, recipe) -> Speculation:
        spec: Eagle3Config = recipe.speculation
        head = Eagle3Head(
            recipe.checkpoint_dir(spec.checkpoint),
            tuple(spec.layers_to_capture) if spec.layers_to_capture is not None else None,
            SaOverride.of(spec.sa_config),
        )
        tree = DynamicTree(spec.dynamic_tree.top_k) if spec.dynamic_tree is not None else None
        return Speculation(method=self.name, mode=None, max_draft_len=spec.max_draft_len, tree=tree, params=head)

    def checks(self, recipe) -> Iterator[Finding]:
        spec: Eagle3Config = recipe.speculation
        if spec.sa_config is not None and spec.dynamic_tree is not None:
            yield Finding(
                ("speculation", "sa_config"),
                "overrides a chain of drafts, and dynamic_tree drafts a tree — remove one of the two",
                also=(("speculation", "dynamic_tree"),),
            )
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

    # --- translations ---------------------------------------------------------------------------------------------
    def speculative_config(self, spec, release, path) -> dict[str, Any] | Refusal:
        head = spec.params
        sa = sa_model_yaml(head.sa, release.line)
        if isinstance(sa, Refusal):
            return sa
        out: dict[str, Any] = {
            "decoding_type": release.spelling(from_dict="Eagle", union="Eagle3"),
            "max_draft_len": spec.max_draft_len,
            release.draft_field: path(head.path),
        }
        if release.line in RELEASES_WITH_ONE_MODEL_FIELD:
            out["eagle3_one_model"] = True  # the one-model worker (two-model is deprecated)
        if head.layers_to_capture is not None and release.line in RELEASES_WITH_LAYER_CHOICE:
            out["eagle3_layers_to_capture"] = sorted(head.layers_to_capture)
        if isinstance(spec.tree, DynamicTree):
            out.update(use_dynamic_tree=True, dynamic_tree_max_topK=spec.tree.top_k)
        if sa is not None:
            out["sa_config"] = sa
        return out

    def llmapi_checks(self, recipe, spec) -> Iterator[Finding]:
        release = recipe.llm_api.release
        if spec.params.layers_to_capture is not None and release not in RELEASES_WITH_LAYER_CHOICE:
            yield Finding(
                ("speculation", "layers_to_capture"),
                f"TensorRT-LLM {release} has no "
                "eagle3_layers_to_capture (it arrived in 1.1; 1.0 captures {1, L//2-1, L-4}) — remove it, "
                "or set llm_api.release to the 1.1+ release you run",
            )

    def rehearse(self, config: Eagle3DecodingConfig, k: int) -> Rehearsed:
        if config.draft_model is None:
            raise Unservable(
                "speculative_model: Draft model must be provided for EAGLE — give the EAGLE-3 head's folder"
            )
        if not config.eagle3_one_model:
            raise Unservable(
                "eagle3_one_model is false (the deprecated two-model EAGLE-3); the reference runtime runs the "
                "one-model worker — set it true or remove it"
            )
        if config.use_dynamic_tree and config.dynamic_tree_max_topK is None:
            raise Unservable("use_dynamic_tree needs dynamic_tree_max_topK > 0")
        if config.sa_config is not None and (config.use_dynamic_tree or config.dynamic_tree_max_topK is not None):
            raise Unservable("sa_config overrides chains: the reference runtime does not enhance a dynamic tree")
        decoding: dict[str, Any] = {"max_draft_len": k, **sa_decoding(config.sa_config)}
        if config.eagle3_layers_to_capture is not None:
            decoding["eagle3_layers_to_capture"] = sorted(set(config.eagle3_layers_to_capture))
        if config.use_dynamic_tree or config.dynamic_tree_max_topK is not None:
            assert config.dynamic_tree_max_topK is not None  # use_dynamic_tree without it is refused above
            decoding.update(use_dynamic_tree=True, dynamic_tree_max_top_k=int(config.dynamic_tree_max_topK))
            if config.max_total_draft_tokens is not None:
                decoding["max_total_draft_tokens"] = int(config.max_total_draft_tokens)
        return Rehearsed(decoding, weights={"eagle3": config.draft_model})  # Eagle3Head.carried_weights


PACK = Eagle3Pack()
