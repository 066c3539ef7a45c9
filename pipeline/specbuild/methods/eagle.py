"""EAGLE-1/2: a one-layer draft head over the target's features proposes a token tree (static or dynamic).

Engine limits (builder asserts, engine fact sheet §1.4, §5): pp_size 1, max_batch_size <= 512, max_draft_len <= 256;
a static tree's depth equals num_eagle_layers with at most max_non_leaves_per_layer non-leaf nodes per level.
EAGLE-2's dynamic tree is not served by Triton's tensorrtllm backend (Triton tutorial; fact sheet §9.4).
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator, Literal

from pydantic import Field, PositiveInt

from specbuild.errors import UserError
from specbuild.methods.base import Converter, Finding, Method, Section
from specbuild.methods.common import architecture, read_hf_config
from specbuild.methods.trees_common import choices_findings
from specbuild.trees import MC_SIM_7B_63, format_choices, non_leaves_per_level, tree_depth

EAGLE_MAX_BATCH_SIZE = 512  # builder.py assert (engine fact sheet §1.4)
EAGLE_MAX_DRAFT_LEN = 256  # builder.py and examples/eagle/convert_checkpoint.py assert


class DynamicTree(Section):
    """EAGLE-2: expand the top_k most likely nodes per level and keep the best by cumulative draft probability."""

    top_k: PositiveInt
    """Children expanded per level; tree size is min(k + k*k*(num_eagle_layers-1), max_draft_len)."""


class EagleConfig(Section):
    """An EAGLE-1 draft head (read as --eagle_model_dir) with a static (EAGLE-1) or dynamic (EAGLE-2) tree."""

    method: Literal["eagle"]
    checkpoint: Path
    """Folder of the EAGLE-1 draft head (LlamaConfig-style config.json plus fc and one decoder layer)."""
    num_eagle_layers: PositiveInt = 4
    """Tree depth: drafting steps per verification."""
    max_draft_len: PositiveInt = 63
    """Total draft tokens (tree nodes) per step; at most 256."""
    max_non_leaves_per_layer: PositiveInt = 10
    """Nodes per level that may have children."""
    choices: list[list[int]] | None = None
    """Static tree (EAGLE-1); default mc_sim_7b_63 when neither choices nor dynamic_tree is given."""
    dynamic_tree: DynamicTree | None = None
    """Dynamic tree (EAGLE-2) instead of choices."""

    @property
    def tree(self) -> list[list[int]] | None:
        """The static tree in use (None with a dynamic tree)."""
        if self.dynamic_tree is not None:
            return None
        return self.choices if self.choices is not None else [list(p) for p in MC_SIM_7B_63]


class Eagle(Method):
    name = "eagle"
    Config = EagleConfig
    trtllm_mode = "eagle"
    mode_flag = 32
    decoding_mode = "eagle"
    summary = "a draft head over the target's features proposes a token tree"

    def max_draft_len(self, spec: EagleConfig) -> int:
        return spec.max_draft_len

    def extra_len(self, spec: EagleConfig) -> int:
        return spec.num_eagle_layers  # builder.py: max_seq_len += max_draft_len + num_eagle_layers for EAGLE

    def checks(self, recipe) -> Iterator[Finding]:
        spec: EagleConfig = recipe.speculation
        if recipe.build.pp_size != 1:
            yield Finding(("build", "pp_size"), "EAGLE engines do not support pipeline parallelism "
                          "(convert_checkpoint.py asserts pp_size == 1) — set pp_size: 1 and use tp_size")
        if recipe.build.max_batch_size > EAGLE_MAX_BATCH_SIZE:
            yield Finding(("build", "max_batch_size"), f"is {recipe.build.max_batch_size} but EAGLE engines allow at "
                          f"most {EAGLE_MAX_BATCH_SIZE} (builder assert) — lower it")
        if recipe.runtime == "tensorrt-llm" and recipe.build.kv_cache_type != "paged":
            yield Finding(("build", "kv_cache_type"), "EAGLE engines need the paged KV cache (EagleForCausalLM.forward "
                          "asserts it) — set kv_cache_type: paged")
        if spec.max_draft_len > EAGLE_MAX_DRAFT_LEN:
            yield Finding(("speculation", "max_draft_len"), f"is {spec.max_draft_len} but EAGLE allows at most "
                          f"{EAGLE_MAX_DRAFT_LEN} (builder assert) — lower it")
        if spec.choices is not None and spec.dynamic_tree is not None:
            yield Finding(("speculation", "dynamic_tree"), "give either choices (EAGLE-1 static tree) or dynamic_tree "
                          "(EAGLE-2), not both — remove one")
            return
        if spec.dynamic_tree is not None:
            yield from self._dynamic_tree_checks(recipe, spec)
            return
        tree = spec.tree
        where = "choices" if spec.choices is not None else "num_eagle_layers"
        yield from choices_findings(tree, spec.max_draft_len)
        depth = tree_depth(tree)
        if depth != spec.num_eagle_layers:
            hint = ("the default tree mc_sim_7b_63 is 4 levels deep — give choices of that depth, or "
                    "num_eagle_layers: 4") if spec.choices is None else f"set num_eagle_layers: {depth} or change the tree"
            yield Finding(("speculation", where), f"the tree is {depth} levels deep but num_eagle_layers is "
                          f"{spec.num_eagle_layers}; EAGLE needs them equal — {hint}")
        for level, count in sorted(non_leaves_per_level(tree).items()):
            if count > spec.max_non_leaves_per_layer:
                yield Finding(("speculation", where), f"level {level} of the tree has {count} nodes with children but "
                              f"max_non_leaves_per_layer is {spec.max_non_leaves_per_layer} — raise it to {count} "
                              "or prune the tree")

    def _dynamic_tree_checks(self, recipe, spec: EagleConfig) -> Iterator[Finding]:
        if recipe.runtime == "tensorrt-llm":
            yield Finding(("speculation", "dynamic_tree"), "EAGLE-2 (dynamic_tree) is not served by Triton's "
                          "tensorrtllm backend (only run.py/the executor support it) — give a static tree with "
                          "choices, or use runtime: reference")
        if spec.dynamic_tree.top_k > spec.max_non_leaves_per_layer:
            yield Finding(("speculation", "dynamic_tree", "top_k"), f"is {spec.dynamic_tree.top_k} but "
                          f"max_non_leaves_per_layer is {spec.max_non_leaves_per_layer}: each level expands top_k "
                          "nodes — lower top_k or raise max_non_leaves_per_layer")

    def file_checks(self, recipe) -> Iterator[Finding]:
        spec: EagleConfig = recipe.speculation
        head = read_hf_config(recipe.resolve(spec.checkpoint))
        target = read_hf_config(recipe.model_dir)
        if head is None:
            yield Finding(("speculation", "checkpoint"), f"no readable config.json in {spec.checkpoint} — point it at "
                          "an EAGLE-1 draft head folder")
            return
        if target is not None:
            for key in ("hidden_size", "vocab_size"):
                if key in head and key in target and head[key] != target[key]:
                    yield Finding(("speculation", "checkpoint"), f"the EAGLE head has {key} {head[key]} but the target "
                                  f"has {target[key]} — the head must be trained on this target")
        if recipe.runtime == "tensorrt-llm" and architecture(recipe.model_dir) not in (None, "LlamaForCausalLM"):
            yield Finding(("model", "checkpoint"), "TensorRT-LLM's engine-path EAGLE covers Llama-architecture "
                          "targets only (TensorRT-LLM #10396) — use runtime: reference or another method")

    def triton_parameters(self, recipe) -> dict[str, str]:
        spec: EagleConfig = recipe.speculation
        if spec.dynamic_tree is not None:  # reference runtime only (refused for tensorrt-llm above)
            return {"decoding_mode": "eagle", "eagle_use_dynamic_tree": "true",
                    "eagle_dynamic_tree_max_top_k": str(spec.dynamic_tree.top_k)}
        return {"decoding_mode": "eagle", "eagle_choices": format_choices(spec.tree)}

    def reference_decoding(self, recipe) -> dict:
        spec: EagleConfig = recipe.speculation
        decoding = {"num_eagle_layers": spec.num_eagle_layers, "max_non_leaves_per_layer": spec.max_non_leaves_per_layer}
        if spec.dynamic_tree is not None:
            decoding.update(eagle_use_dynamic_tree=True, eagle_dynamic_tree_max_top_k=spec.dynamic_tree.top_k)
        else:
            decoding.update(eagle_choices=spec.tree)
        return decoding

    def speculative_dirs(self, recipe) -> dict:
        return {"eagle": recipe.resolve(recipe.speculation.checkpoint)}

    def pretrained_extra(self, recipe) -> dict:
        spec: EagleConfig = recipe.speculation
        head = read_hf_config(recipe.resolve(spec.checkpoint)) or {}
        net = {k: head[k] for k in ("num_hidden_layers", "num_attention_heads", "hidden_size", "intermediate_size",
                                    "num_key_value_heads", "rms_norm_eps", "max_position_embeddings", "vocab_size")
               if k in head}
        return {"architecture": "EagleForCausalLM", "max_draft_len": spec.max_draft_len,
                "num_eagle_layers": spec.num_eagle_layers, "max_non_leaves_per_layer": spec.max_non_leaves_per_layer,
                "eagle_net_config": {"architecture": "LlamaForCausalLM", **net}}

    def converter(self, recipe, examples_dir: str | None) -> Converter:
        spec: EagleConfig = recipe.speculation
        if examples_dir:
            return Converter(
                via="script", model_class="EagleForCausalLM", script="eagle/convert_checkpoint.py",
                script_args=["--eagle_model_dir", str(recipe.resolve(spec.checkpoint)),
                             "--max_draft_len", str(spec.max_draft_len), "--num_eagle_layers", str(spec.num_eagle_layers),
                             "--max_non_leaves_per_layer", str(spec.max_non_leaves_per_layer)],
                reason="examples/eagle/convert_checkpoint.py from the given TensorRT-LLM examples tree",
            )
        if spec.num_eagle_layers != 4 or spec.max_draft_len != 63:
            raise UserError(
                f"speculation: EAGLE with num_eagle_layers {spec.num_eagle_layers} and max_draft_len {spec.max_draft_len} "
                "needs TensorRT-LLM's example converter: the wheel's EagleForCausalLM.from_hugging_face loads exactly 4 "
                "layers and leaves max_draft_len at 63 (engine fact sheet §2.3, §9.5) — pass --trtllm-examples DIR "
                "(e.g. /app/examples in the NGC container) or use num_eagle_layers: 4 and max_draft_len: 63"
            )
        if recipe.build.quantization != "none":
            raise UserError(
                f"build.quantization: {recipe.build.quantization} with EAGLE needs TensorRT-LLM's example converter "
                "(examples/eagle/convert_checkpoint.py handles quantized weights; the wheel's EagleForCausalLM path "
                "is only known to work unquantized) — pass --trtllm-examples DIR (e.g. /app/examples in the NGC "
                "container) or set quantization: none"
            )
        # EagleConfig.from_hugging_face reads speculative_config.num_eagle_layers / .max_non_leaves_per_layer as
        # attributes and kwargs['use_parallel_embedding'] / kwargs['embedding_sharding_dim'] without defaults
        # (KeyError when absent); it never sets max_draft_len (63).
        return Converter(
            via="wheel", model_class="EagleForCausalLM",
            kwargs={"speculative_model_dir": str(recipe.resolve(spec.checkpoint)),
                    "speculative_config": {"num_eagle_layers": spec.num_eagle_layers,
                                           "max_non_leaves_per_layer": spec.max_non_leaves_per_layer,
                                           "max_draft_len": spec.max_draft_len},
                    "use_parallel_embedding": False, "embedding_sharding_dim": 0},
            reason="wheel API: safe only for 4 EAGLE layers and max_draft_len 63 (engine fact sheet §2.3)",
        )
