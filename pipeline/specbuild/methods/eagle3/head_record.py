"""What an EAGLE-3 head records about its target, which the head/target preflight compares (specbuild/methods/preflight.py)."""

from __future__ import annotations

from pathlib import Path

from specbuild.checkpoints.checkpoint_files import checkpoint_root
from specbuild.checkpoints.checkpoint_tensors import EAGLE3, preferred_files, tensor_shapes
from specbuild.methods import preflight
from specbuild.methods.preflight import SHARED, Fact, HeadRecord, Rope, config_int

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
