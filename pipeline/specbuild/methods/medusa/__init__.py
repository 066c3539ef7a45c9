"""Medusa: K extra decoding heads on the target propose a token tree, verified in one target forward.

TensorRT-LLM runs Medusa greedy only (medusa_temperature=0; TensorRT-LLM examples/medusa/README.md); the reference
runtime samples losslessly (recursive rejection sampling over the tree). The pack: this section, params.py, the engine
flavour's parameters here (the C++ backend and the reference core read the same: TensorRT-LLM triton_backend/
all_models/inflight_batcher_llm/tensorrt_llm/config.pbtxt@2a9abd95), decoder.py (reference), trtllm.py (TensorRT-LLM).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator, Literal

from pydantic import Field

from specbuild.facts.bounds import PositiveInt32
from specbuild.checkpoints.checkpoint_tensors import MEDUSA, medusa_heads, preferred_files, tensor_names, tensor_shapes
from specbuild.facts.engine_facts import SpecMode
from specbuild.methods import preflight
from specbuild.findings import Finding
from specbuild.methods.medusa.params import MedusaHeads
from specbuild.methods.pack import MethodPack, Refusal
from specbuild.section import Section
from specbuild.checkpoints.checkpoint_files import checkpoint_root, read_hf_config
from specbuild.methods.preflight import Fact, HeadRecord, config_int
from specbuild.methods.trees_common import choices_findings, choices_parameter, rank_findings
from specbuild.methods.weights import weights_findings
from specbuild.speculation import Speculation, StaticTree
from specbuild.facts.trees import MC_SIM_7B_63, format_choices, tree_depth


class MedusaConfig(Section):
    """Medusa heads trained on the target (FasterDecoding layout, read as --medusa_model_dir)."""

    method: Literal["medusa"]
    checkpoint: Path
    """Folder (or model id[@revision]) of the Medusa heads: config.json with medusa_num_layers and the head weights."""
    num_heads: PositiveInt32
    """Medusa heads to use (passed explicitly to the converter): at most the heads the weights hold, which
    config.json's medusa_num_heads may understate (FasterDecoding's vicuna-7b heads: 2 in config.json, 5 in
    medusa_lm_head.pt; TensorRT-LLM's README converts them with 4)."""
    num_layers: PositiveInt32 = 1
    """ResBlock layers per head; must equal the checkpoint's medusa_num_layers."""
    choices: list[list[int]] = Field(default_factory=lambda: [list(p) for p in MC_SIM_7B_63])
    """The static tree as paths of top-k indices; default mc_sim_7b_63 (63 nodes, depth 4)."""
    max_draft_len: PositiveInt32 = 63
    """Engine limit on draft tokens per step (tree nodes); the tree must fit."""


class MedusaPack(MethodPack):
    name = "medusa"
    Config = MedusaConfig
    Params = MedusaHeads
    summary = "extra heads on the target propose a token tree"
    decoding_mode = "medusa"
    decoding_types = ("Medusa",)
    decoder = "decoder:MedusaDecoder"
    trtllm = "trtllm:PART"
    trainer = "trainer:TRAINER"

    def describe(self, recipe) -> Speculation:
        spec: MedusaConfig = recipe.speculation
        return Speculation(
            method=self.name,
            mode=SpecMode.MEDUSA,
            max_draft_len=spec.max_draft_len,
            tree=StaticTree(tuple(tuple(p) for p in spec.choices)),
            params=MedusaHeads(recipe.checkpoint_dir(spec.checkpoint), spec.num_heads, spec.num_layers),
        )

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
        cfg = read_hf_config(recipe.checkpoint_dir(spec.checkpoint))
        if cfg is None:
            yield Finding(
                ("speculation", "checkpoint"),
                f"no readable config.json in {spec.checkpoint} — "
                "point it at a Medusa heads folder (config.json with medusa_num_heads)",
            )
            return
        layout = list(weights_findings(recipe.checkpoint_dir(spec.checkpoint), spec.checkpoint, MEDUSA))
        yield from layout
        target = read_hf_config(recipe.model_dir) or {}
        yield from rank_findings(spec.choices, target.get("vocab_size"))
        if not layout:  # a folder of another kind is named as such, not compared as heads
            paired = list(
                preflight.findings(recipe, head_record(recipe.checkpoint_dir(spec.checkpoint), cfg, spec.num_layers))
            )
            yield from paired
            if any(not f.warning for f in paired):
                return
        yield from self._head_count_findings(recipe)
        for key, ours, field in (("medusa_num_layers", spec.num_layers, "num_layers"),):
            theirs = cfg.get(key)
            if theirs is None:
                continue
            if isinstance(theirs, bool) or not isinstance(theirs, int):
                yield Finding(
                    ("speculation", "checkpoint"),
                    f"{spec.checkpoint}/config.json has {key}: {theirs!r}, not an integer — fix the heads' config.json",
                )
            elif theirs != ours:
                yield Finding(
                    ("speculation", field),
                    f"is {ours} but {spec.checkpoint}/config.json has {key}: {theirs} — set {field}: {theirs}",
                )

    def _head_count_findings(self, recipe) -> Iterator[Finding]:
        """num_heads is at most the heads the weights hold (TensorRT-LLM's load_medusa_hf reads heads
        0..num_medusa_heads-1 from the file and stops at a KeyError past them: tensorrt_llm/models/medusa/
        weight.py); config.json's medusa_num_heads is not the count (checkpoint_tensors.medusa_heads)."""
        spec: MedusaConfig = recipe.speculation
        folder = recipe.checkpoint_dir(spec.checkpoint)
        files = preferred_files(folder, MEDUSA)
        names = tensor_names(folder, files, root=checkpoint_root(folder))
        if not names:
            return
        held = medusa_heads(names)
        if spec.num_heads > held:
            file = next((f for f in files if (folder / f).is_file()), "its weights")
            yield Finding(
                ("speculation", "num_heads"),
                f"is {spec.num_heads} but {spec.checkpoint}/{file} holds "
                f"{held} Medusa head(s) (0..{held - 1}) — set num_heads to at most {held}",
            )

    # --- translations ---------------------------------------------------------------------------------------------
    def pretrained_config(self, spec) -> dict[str, Any]:
        heads = spec.params
        return {
            "architecture": "MedusaForCausalLM",
            "max_draft_len": spec.max_draft_len,
            "num_medusa_heads": heads.num_heads,
            "num_medusa_layers": heads.num_layers,
        }

    def core_parameters(self, spec) -> dict[str, str]:
        return {"medusa_choices": format_choices(spec.tree.as_lists())}

    def decoding(self, spec) -> dict[str, Any]:
        return {"medusa_choices": spec.tree.as_lists(), "num_medusa_heads": spec.params.num_heads}

    def decoding_overrides(self, get, get_bool, get_int) -> dict[str, Any]:
        text = get("medusa_choices")
        return {"medusa_choices": choices_parameter(text)} if text else {}

    def speculative_config(self, spec, release, path) -> Refusal:
        # tensorrt_llm/llmapi/llm_args.py, main after 1.3.0rc3
        return Refusal("Medusa's supports_backend returns False for pytorch", "flavour: engine")


PACK = MedusaPack()

HEAD_FACTS = (
    preflight.ARCHITECTURE,
    preflight.TARGET_NAME,
    preflight.HIDDEN,
    preflight.VOCAB,
    preflight.LM_HEAD,
    preflight.DTYPE,
    preflight.QUANTIZATION,
)  # position-free MLPs over the last hidden state: no rope


def head_record(folder: Path, cfg: dict, num_layers: int) -> HeadRecord:
    """What Medusa heads record about their target: head i is ResBlocks `i.<l>.linear` [H, H] and then its own
    projection `i.<num_layers>.weight` [V, H] (FasterDecoding/Medusa `medusa/model/medusa_model.py`), so the
    weights carry the target's width and vocabulary; config.json names the target (base_model_name_or_path) and,
    in some exports, hidden_size and vocab_size (read after the weights: FasterDecoding's config.json understates
    even its head count)."""
    shapes = tensor_shapes(folder, preferred_files(folder, MEDUSA), root=checkpoint_root(folder)) or {}
    hidden, vocab, lm_head = [], [], None
    projection, block = shapes.get(f"0.{num_layers}.weight"), shapes.get("0.0.linear.weight")
    if projection is not None and len(projection) == 2:
        shown = f"0.{num_layers}.weight {list(projection)}"
        hidden.append(Fact(projection[1], shown))
        vocab.append(Fact(projection[0], shown))
        lm_head = Fact(tuple(projection), shown)
    if block is not None and len(block) == 2:
        hidden.append(Fact(block[1], f"0.0.linear.weight {list(block)}"))
    hidden += [f for f in (config_int(cfg, "hidden_size"),) if f is not None]
    vocab += [f for f in (config_int(cfg, "vocab_size"),) if f is not None]
    base = cfg.get("base_model_name_or_path")
    return HeadRecord(
        label="each Medusa head",
        facts=HEAD_FACTS,
        hidden=tuple(hidden),
        vocab=tuple(vocab),
        lm_head=lm_head,
        own_hidden=hidden[0] if hidden else None,
        target_name=Fact(base, "config.json base_model_name_or_path") if isinstance(base, str) and base else None,
        dtype=preflight.dtype_of(cfg),
        quantization=preflight.quantization_of(cfg, folder),
    )
