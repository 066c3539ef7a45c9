"""EAGLE-1/2: a one-layer draft head over the target's features proposes a token tree (static or dynamic).

Engine limits (tensorrt_llm/builder.py asserts): pp_size 1, max_batch_size <= 512, max_draft_len <= 256;
a static tree's depth equals num_eagle_layers with at most max_non_leaves_per_layer non-leaf nodes per level.
EAGLE-2's dynamic tree is not served by Triton's tensorrtllm backend (triton-inference-server/tutorials
Feature_Guide/Speculative_Decoding/TRT-LLM/README.md): the tensorrt-llm runtime refuses it (trtllm.py). The pack:
this section, params.py, the engine flavour's parameters here, decoder.py (reference), trtllm.py (TensorRT-LLM).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator, Literal

from specbuild.facts.bounds import PositiveInt32
from specbuild.checkpoints.checkpoint_tensors import EAGLE1, preferred_files, tensor_shapes
from specbuild.facts.engine_facts import SpecMode
from specbuild.methods import preflight
from specbuild.findings import Finding
from specbuild.methods.eagle.params import EagleHead
from specbuild.methods.pack import MethodPack, Refusal
from specbuild.section import Section
from specbuild.checkpoints.checkpoint_files import checkpoint_root, read_hf_config
from specbuild.methods.preflight import SHARED, Fact, HeadRecord, config_int
from specbuild.methods.trees_common import choices_findings, choices_parameter, rank_findings
from specbuild.methods.weights import weights_findings
from specbuild.speculation import DynamicTree, Speculation, StaticTree
from specbuild.facts.trees import MC_SIM_7B_63, format_choices, non_leaves_per_level, tree_depth

EAGLE_MAX_BATCH_SIZE = 512  # builder.py assert
EAGLE_MAX_DRAFT_LEN = 256  # builder.py and examples/eagle/convert_checkpoint.py assert


class DynamicTreeSection(Section):
    """EAGLE-2: expand the top_k most likely nodes per level and keep the best by cumulative draft probability."""

    top_k: PositiveInt32
    """Children expanded per level; tree size is min(k + k*k*(num_eagle_layers-1), max_draft_len)."""


class EagleConfig(Section):
    """An EAGLE-1 draft head (read as --eagle_model_dir) with a static (EAGLE-1) or dynamic (EAGLE-2) tree."""

    method: Literal["eagle"]
    checkpoint: Path
    """Folder (or model id[@revision]) of the EAGLE-1 draft head (LlamaConfig-style config.json plus fc and one
    decoder layer)."""
    num_eagle_layers: PositiveInt32 = 4
    """Tree depth: drafting steps per verification."""
    max_draft_len: PositiveInt32 = 63
    """Total draft tokens (tree nodes) per step; at most 256."""
    max_non_leaves_per_layer: PositiveInt32 = 10
    """Nodes per level that may have children."""
    choices: list[list[int]] | None = None
    """Static tree (EAGLE-1); default mc_sim_7b_63 when neither choices nor dynamic_tree is given."""
    dynamic_tree: DynamicTreeSection | None = None
    """Dynamic tree (EAGLE-2) instead of choices."""

    @property
    def tree(self) -> list[list[int]] | None:
        """The static tree in use (None with a dynamic tree)."""
        if self.dynamic_tree is not None:
            return None
        return self.choices if self.choices is not None else [list(p) for p in MC_SIM_7B_63]


class EaglePack(MethodPack):
    name = "eagle"
    Config = EagleConfig
    Params = EagleHead
    summary = "a draft head over the target's features proposes a token tree"
    decoding_mode = "eagle"
    decoder = "decoder:EagleDecoder"
    trtllm = "trtllm:PART"
    trainer = "trainer:TRAINER"

    def describe(self, recipe) -> Speculation:
        spec: EagleConfig = recipe.speculation
        tree: StaticTree | DynamicTree
        if spec.dynamic_tree is not None:
            tree = DynamicTree(spec.dynamic_tree.top_k)
        else:
            assert spec.tree is not None  # no dynamic tree: the static one (EagleConfig.tree)
            tree = StaticTree(tuple(tuple(p) for p in spec.tree))
        head = EagleHead(recipe.checkpoint_dir(spec.checkpoint), spec.num_eagle_layers, spec.max_non_leaves_per_layer)
        # builder.py: max_seq_len += max_draft_len + num_eagle_layers for EAGLE
        return Speculation(
            method=self.name,
            mode=SpecMode.EAGLE,
            max_draft_len=spec.max_draft_len,
            extra_seq_len=spec.num_eagle_layers,
            tree=tree,
            params=head,
        )

    def checks(self, recipe) -> Iterator[Finding]:
        spec: EagleConfig = recipe.speculation
        if recipe.build.pp_size != 1:
            yield Finding(
                ("build", "pp_size"),
                "EAGLE engines do not support pipeline parallelism "
                "(convert_checkpoint.py asserts pp_size == 1) — set pp_size: 1 and use tp_size",
            )
        if recipe.build.max_batch_size > EAGLE_MAX_BATCH_SIZE:
            yield Finding(
                ("build", "max_batch_size"),
                f"is {recipe.build.max_batch_size} but EAGLE engines allow at "
                f"most {EAGLE_MAX_BATCH_SIZE} (builder assert) — lower it",
            )
        if spec.max_draft_len > EAGLE_MAX_DRAFT_LEN:
            yield Finding(
                ("speculation", "max_draft_len"),
                f"is {spec.max_draft_len} but EAGLE allows at most {EAGLE_MAX_DRAFT_LEN} (builder assert) — lower it",
            )
        if spec.choices is not None and spec.dynamic_tree is not None:
            yield Finding(
                ("speculation", "dynamic_tree"),
                "give either choices (EAGLE-1 static tree) or dynamic_tree (EAGLE-2), not both — remove one",
            )
            return
        if spec.dynamic_tree is not None:
            if spec.dynamic_tree.top_k > spec.max_non_leaves_per_layer:
                yield Finding(
                    ("speculation", "dynamic_tree", "top_k"),
                    f"is {spec.dynamic_tree.top_k} but "
                    f"max_non_leaves_per_layer is {spec.max_non_leaves_per_layer}: each level expands "
                    "top_k nodes — lower top_k or raise max_non_leaves_per_layer",
                )
            return
        tree = spec.tree
        assert tree is not None  # no dynamic tree: the static one (EagleConfig.tree)
        where = "choices" if spec.choices is not None else "num_eagle_layers"
        yield from choices_findings(tree, spec.max_draft_len)
        depth = tree_depth(tree)
        if depth != spec.num_eagle_layers:
            hint = (
                ("the default tree mc_sim_7b_63 is 4 levels deep — give choices of that depth, or num_eagle_layers: 4")
                if spec.choices is None
                else f"set num_eagle_layers: {depth} or change the tree"
            )
            yield Finding(
                ("speculation", where),
                f"the tree is {depth} levels deep but num_eagle_layers is "
                f"{spec.num_eagle_layers}; EAGLE needs them equal — {hint}",
            )
        for level, count in sorted(non_leaves_per_level(tree).items()):
            if count > spec.max_non_leaves_per_layer:
                yield Finding(
                    ("speculation", where),
                    f"level {level} of the tree has {count} nodes with children but "
                    f"max_non_leaves_per_layer is {spec.max_non_leaves_per_layer} — raise it to {count} "
                    "or prune the tree",
                )

    def file_checks(self, recipe) -> Iterator[Finding]:
        spec: EagleConfig = recipe.speculation
        folder = recipe.checkpoint_dir(spec.checkpoint)
        head = read_hf_config(folder)
        target = read_hf_config(recipe.model_dir)
        if head is None:
            yield Finding(
                ("speculation", "checkpoint"),
                f"no readable config.json in {spec.checkpoint} — point it at an EAGLE-1 draft head folder",
            )
            return
        layout = list(weights_findings(folder, spec.checkpoint, EAGLE1))
        yield from layout
        if target is not None and spec.tree is not None:
            yield from rank_findings(
                spec.tree,
                target.get("vocab_size"),
                ("speculation", "choices" if spec.choices is not None else "num_eagle_layers"),
            )
        if not layout:  # a folder of another kind is named as such, not compared as a head
            yield from preflight.findings(recipe, head_record(folder, head))

    # --- translations ---------------------------------------------------------------------------------------------
    def pretrained_config(self, spec) -> dict[str, Any]:
        head = spec.params
        config = read_hf_config(head.path) or {}
        net = {k: config[k] for k in EAGLE_NET_KEYS if k in config}
        return {
            "architecture": "EagleForCausalLM",
            "max_draft_len": spec.max_draft_len,
            "num_eagle_layers": head.num_eagle_layers,
            "max_non_leaves_per_layer": head.max_non_leaves_per_layer,
            "eagle_net_config": {"architecture": "LlamaForCausalLM", **net},
        }

    def core_parameters(self, spec) -> dict[str, str]:
        if isinstance(spec.tree, StaticTree):
            return {"eagle_choices": format_choices(spec.tree.as_lists())}
        assert isinstance(spec.tree, DynamicTree)  # EAGLE-2 (reference runtime only: refused for tensorrt-llm)
        return {"eagle_use_dynamic_tree": "true", "eagle_dynamic_tree_max_top_k": str(spec.tree.top_k)}

    def decoding(self, spec) -> dict[str, Any]:
        head = spec.params
        out: dict[str, Any] = {
            "num_eagle_layers": head.num_eagle_layers,
            "max_non_leaves_per_layer": head.max_non_leaves_per_layer,
        }
        if isinstance(spec.tree, DynamicTree):
            out.update(eagle_use_dynamic_tree=True, eagle_dynamic_tree_max_top_k=spec.tree.top_k)
        elif isinstance(spec.tree, StaticTree):
            out.update(eagle_choices=spec.tree.as_lists())
        return out

    def decoding_overrides(self, get, get_bool, get_int) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if get("eagle_choices"):
            out["eagle_choices"] = choices_parameter(get("eagle_choices"))
        if get("eagle_use_dynamic_tree") is not None:
            out["eagle_use_dynamic_tree"] = get_bool("eagle_use_dynamic_tree")
        if get("eagle_dynamic_tree_max_top_k") is not None:
            out["eagle_dynamic_tree_max_top_k"] = get_int("eagle_dynamic_tree_max_top_k")
        return out

    def speculative_config(self, spec, release, path) -> Refusal:
        # tensorrt_llm/llmapi/llm_args.py, main after 1.3.0rc3
        return Refusal(
            "the PyTorch backend reads `Eagle` as EAGLE-3, and EAGLE-1/2 heads are incompatible",
            "method: eagle3 with an EAGLE-3 head, or flavour: engine",
        )


# eagle_net_config keys copied from the EAGLE head's config.json (TensorRT-LLM examples/eagle/convert_checkpoint.py)
EAGLE_NET_KEYS = (
    "num_hidden_layers",
    "num_attention_heads",
    "hidden_size",
    "intermediate_size",
    "num_key_value_heads",
    "rms_norm_eps",
    "max_position_embeddings",
    "vocab_size",
)
PACK = EaglePack()

HEAD_FACTS = (
    preflight.ARCHITECTURE,
    preflight.TARGET_NAME,
    preflight.HIDDEN,
    preflight.VOCAB,
    preflight.LM_HEAD,
    preflight.POSITIONS,
    preflight.ROPE,
    preflight.DTYPE,
    preflight.QUANTIZATION,
)


def head_record(folder: Path, cfg: dict) -> HeadRecord:
    """What an EAGLE-1 head records about its target: its config.json is a one-layer copy of a Llama config of the
    target's width and vocabulary (SafeAILab/EAGLE `train/vicuna_7B_config.json`); fc.weight [H, 2H] fuses the
    token embedding with the target's hidden state and embed_tokens is [V, H] (`eagle/model/cnets1.py`); it
    predicts with the target's lm_head. Its `architectures` is its own (Llama whatever the target): it does not
    record its target's."""
    shapes = tensor_shapes(folder, preferred_files(folder, EAGLE1), root=checkpoint_root(folder)) or {}
    hidden, vocab = [], []
    fc, embed = shapes.get("fc.weight"), shapes.get("embed_tokens.weight")
    if fc is not None and len(fc) == 2 and fc[1] % 2 == 0:
        hidden.append(Fact(fc[1] // 2, f"fc.weight {list(fc)}"))
    if embed is not None and len(embed) == 2:
        hidden.append(Fact(embed[1], f"embed_tokens.weight {list(embed)}"))
        vocab.append(Fact(embed[0], f"embed_tokens.weight {list(embed)}"))
    own = config_int(cfg, "hidden_size")
    hidden += [own] if own is not None else []
    vocab += [f for f in (config_int(cfg, "vocab_size"),) if f is not None]
    return HeadRecord(
        label="the EAGLE head",
        facts=HEAD_FACTS,
        hidden=tuple(hidden),
        own_hidden=own,
        vocab=tuple(vocab),
        lm_head=Fact(SHARED, "EAGLE-1 heads predict with the target's lm_head"),
        **preflight.head_config_facts(cfg, folder),
    )
