"""Child process: convert a Hugging Face checkpoint to a TensorRT-LLM checkpoint with the wheel's model classes.

    python -m specbuild.trtllm.convert_worker SPEC.json [--output-dir DIR]

SPEC.json: {"model_class", "function": "from_hugging_face" | "quantize", "hf_model_dir", "dtype", "tp_size",
"pp_size", "quant_algo": null | "W8A16" | ..., "kwargs": {...}, "output_dir"}; --output-dir overrides output_dir
(specbuild writes into a partial folder that is renamed into place afterwards).

from_hugging_face: for each rank r of tp_size * pp_size, `<Class>.from_hugging_face(dir, dtype, mapping=Mapping(rank r),
quant_config, **kwargs)` then `save_checkpoint(output_dir, save_config=(r == 0))`
(tensorrt_llm/models/modeling_utils.py). quantize: one `<Class>.quantize(dir, output_dir, dtype, mapping, quant_config,
**kwargs)` writes every rank (ModelOpt calibration).

Kept free of specbuild imports: it runs where tensorrt_llm is importable, and its memory goes back to the system
when it exits.
"""

from __future__ import annotations

import gc
import json
import sys
import types
from pathlib import Path


def _kwargs(raw: dict) -> dict:
    kwargs = dict(raw)
    if kwargs.get("speculative_model_dir") is not None:
        # Medusa opens speculative_model_dir / "config.json": it must be a pathlib.Path
        # (tensorrt_llm/models/medusa/config.py).
        kwargs["speculative_model_dir"] = Path(kwargs["speculative_model_dir"])
    if isinstance(kwargs.get("speculative_config"), dict):
        # The config readers use attribute access (speculative_config.num_medusa_heads, .num_eagle_layers). A plain
        # namespace avoids the LLM-API decoding configs, whose validators differ between releases
        # (tensorrt_llm/llmapi/llm_args.py).
        kwargs["speculative_config"] = types.SimpleNamespace(**kwargs["speculative_config"])
    return kwargs


def convert(spec: dict) -> None:
    import tensorrt_llm  # noqa: F401  (the real wheel prints its banner here)
    from tensorrt_llm import models
    from tensorrt_llm.mapping import Mapping
    from tensorrt_llm.models.modeling_utils import QuantConfig
    from tensorrt_llm.quantization import QuantAlgo

    cls = getattr(models, spec["model_class"])
    tp, pp = int(spec["tp_size"]), int(spec["pp_size"])
    world = tp * pp
    quant = QuantConfig(quant_algo=QuantAlgo[spec["quant_algo"]]) if spec.get("quant_algo") else None
    kwargs = _kwargs(spec.get("kwargs", {}))
    out = spec["output_dir"]
    if spec["function"] == "quantize":
        print(f"[specbuild] {spec['model_class']}.quantize: {world} rank(s) -> {out}", flush=True)
        cls.quantize(
            spec["hf_model_dir"],
            out,
            dtype=spec["dtype"],
            mapping=Mapping(world_size=world, tp_size=tp, pp_size=pp),
            quant_config=quant,
            **kwargs,
        )
        return
    for rank in range(world):
        print(f"[specbuild] {spec['model_class']}.from_hugging_face: rank {rank} of {world}", flush=True)
        model = cls.from_hugging_face(
            spec["hf_model_dir"],
            spec["dtype"],
            mapping=Mapping(world_size=world, rank=rank, tp_size=tp, pp_size=pp),
            quant_config=quant,
            **dict(kwargs),
        )
        model.save_checkpoint(out, save_config=(rank == 0))
        del model
        gc.collect()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) not in (1, 3) or (len(args) == 3 and args[1] != "--output-dir"):
        print("usage: python -m specbuild.trtllm.convert_worker SPEC.json [--output-dir DIR]", file=sys.stderr)
        return 2
    spec = json.loads(Path(args[0]).read_text())
    if len(args) == 3:
        spec["output_dir"] = args[2]
    convert(spec)
    print("[specbuild] conversion finished", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
