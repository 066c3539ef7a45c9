"""Medusa: K extra decoding heads on the target propose a token tree, verified in one target forward.

TensorRT-LLM runs Medusa greedy only (medusa_temperature=0; repository fact sheet §2.1), so sampling is refused on
that runtime; the reference runtime samples losslessly (recursive rejection sampling over the tree).
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator, Literal

from pydantic import Field, PositiveInt

from specbuild.errors import UserError
from specbuild.methods.base import Converter, Finding, Method, Section
from specbuild.paths import show
from specbuild.methods.common import architecture, read_hf_config
from specbuild.methods.trees_common import choices_findings
from specbuild.trees import MC_SIM_7B_63, format_choices, tree_depth

# examples/medusa/convert_checkpoint.py --model_type choices (engine fact sheet §2.2)
MEDUSA_MODEL_TYPES = {"LlamaForCausalLM": "llama", "MixtralForCausalLM": "mixtral", "Qwen2ForCausalLM": "qwen2"}


class MedusaConfig(Section):
    """Medusa heads trained on the target (FasterDecoding layout, read as --medusa_model_dir)."""

    method: Literal["medusa"]
    checkpoint: Path
    """Folder of the Medusa heads: config.json with medusa_num_heads/medusa_num_layers and the head weights."""
    num_heads: PositiveInt
    """Number of Medusa heads; must equal the checkpoint's medusa_num_heads (passed explicitly to the converter)."""
    num_layers: PositiveInt = 1
    """ResBlock layers per head; must equal the checkpoint's medusa_num_layers."""
    choices: list[list[int]] = Field(default_factory=lambda: [list(p) for p in MC_SIM_7B_63])
    """The static tree as paths of top-k indices; default mc_sim_7b_63 (63 nodes, depth 4)."""
    max_draft_len: PositiveInt = 63
    """Engine limit on draft tokens per step (tree nodes); the tree must fit."""


class Medusa(Method):
    name = "medusa"
    Config = MedusaConfig
    trtllm_mode = "medusa"
    mode_flag = 4
    decoding_mode = "medusa"
    greedy_only_on = ("tensorrt-llm",)
    summary = "extra heads on the target propose a token tree"

    def max_draft_len(self, spec: MedusaConfig) -> int:
        return spec.max_draft_len

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
        for key, ours, field in (("medusa_num_heads", spec.num_heads, "num_heads"),
                                 ("medusa_num_layers", spec.num_layers, "num_layers")):
            theirs = cfg.get(key)
            if theirs is not None and int(theirs) != ours:
                yield Finding(("speculation", field), f"is {ours} but {spec.checkpoint}/config.json has "
                              f"{key}: {theirs} — set {field}: {theirs}")
        if recipe.runtime == "tensorrt-llm":
            arch = architecture(recipe.model_dir)
            if arch is not None and arch not in MEDUSA_MODEL_TYPES:
                yield Finding(("model", "checkpoint"), f"TensorRT-LLM's Medusa supports llama, mixtral and qwen2 "
                              f"targets, not {arch} — use runtime: reference or another method")

    def triton_parameters(self, recipe) -> dict[str, str]:
        return {"decoding_mode": "medusa", "medusa_choices": format_choices(recipe.speculation.choices)}

    def reference_decoding(self, recipe) -> dict:
        spec: MedusaConfig = recipe.speculation
        return {"medusa_choices": spec.choices, "num_medusa_heads": spec.num_heads}

    def speculative_dirs(self, recipe) -> dict:
        return {"medusa": recipe.resolve(recipe.speculation.checkpoint)}

    def pretrained_extra(self, recipe) -> dict:
        spec: MedusaConfig = recipe.speculation
        return {"architecture": "MedusaForCausalLM", "max_draft_len": spec.max_draft_len,
                "num_medusa_heads": spec.num_heads, "num_medusa_layers": spec.num_layers}

    def converter(self, recipe, examples_dir: str | None) -> Converter:
        spec: MedusaConfig = recipe.speculation
        model_type = MEDUSA_MODEL_TYPES.get(architecture(recipe.model_dir) or "LlamaForCausalLM", "llama")
        if examples_dir:
            return Converter(
                via="script", model_class="MedusaForCausalLm", script="medusa/convert_checkpoint.py",
                script_args=["--medusa_model_dir", show(recipe.resolve(spec.checkpoint)),
                             "--num_medusa_heads", str(spec.num_heads), "--num_medusa_layers", str(spec.num_layers),
                             "--max_medusa_token_len", str(spec.max_draft_len), "--model_type", model_type],
                reason="examples/medusa/convert_checkpoint.py from the given TensorRT-LLM examples tree",
            )
        if recipe.model.dtype != "float16":
            raise UserError(
                f"model.dtype: {recipe.model.dtype} with Medusa needs TensorRT-LLM's example converter: the wheel's "
                "MedusaForCausalLm.from_hugging_face converts weights as float16 whatever dtype is asked (engine fact "
                "sheet §9.6) — pass --trtllm-examples DIR (e.g. /app/examples in the NGC container) or set dtype: float16"
            )
        if recipe.build.quantization != "none":
            raise UserError(
                f"build.quantization: {recipe.build.quantization} with Medusa needs TensorRT-LLM's example converter: "
                "the wheel's MedusaForCausalLm.from_hugging_face converts the weights unquantized (float16) while "
                "the checkpoint config would claim the quantization — pass --trtllm-examples DIR (e.g. /app/examples "
                "in the NGC container) or set quantization: none"
            )
        # MedusaConfig.from_hugging_face reads speculative_config.num_medusa_heads (an attribute: the worker passes
        # an object), takes num_medusa_layers from the heads' config.json (medusa_num_layers, checked against the
        # recipe) and leaves max_draft_len at 63 unless it is given as a config field; the engine's Medusa inputs
        # are sized by the checkpoint's max_draft_len, so it must equal trtllm-build's --max_draft_len.
        return Converter(
            via="wheel", model_class="MedusaForCausalLm",
            kwargs={"speculative_model_dir": show(recipe.resolve(spec.checkpoint)),
                    "speculative_config": {"num_medusa_heads": spec.num_heads},
                    "max_draft_len": spec.max_draft_len},
            reason="wheel API with num_medusa_heads and max_draft_len passed explicitly (its config reader looks for "
                   "num_medusa_heads, the heads config says medusa_num_heads; max_draft_len defaults to 63; engine "
                   "fact sheet §9.6)",
        )
