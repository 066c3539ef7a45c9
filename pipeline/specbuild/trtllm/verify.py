"""The plan's `verify-engine` steps: read an engine's config.json back and compare it with the recipe.

trtllm-build rewrites some limits (max_seq_len += max_draft_len [+ num_eagle_layers], max_num_tokens clipped and
raised; engine fact sheet §1.2, §1.4); `specbuild.plan.engine_limits` predicts the values, and a difference means
the installed TensorRT-LLM did not build what the recipe asks for.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from specbuild.errors import UserError
from specbuild.plan import show

# SpeculativeDecodingMode IntFlag values (design contract; engine fact sheet §1.4).
MODE_VALUES = {"NONE": 1, "DRAFT_TOKENS_EXTERNAL": 2, "MEDUSA": 4, "LOOKAHEAD_DECODING": 8,
               "EXPLICIT_DRAFT_TOKENS": 16, "EAGLE": 32}
MODE_NAMES = {v: k for k, v in MODE_VALUES.items()}

RECIPE_FIELD = {
    "max_batch_size": "build.max_batch_size",
    "max_input_len": "build.max_input_len",
    "max_seq_len": "build.max_seq_len (+ max_draft_len, + num_eagle_layers for EAGLE)",
    "max_num_tokens": "build.max_num_tokens (clipped and raised as trtllm-build does)",
    "max_beam_width": "build.max_beam_width",
    "max_draft_len": "speculation.max_draft_len (0 for a plain engine)",
    "speculative_decoding_mode": "speculation.method",
}


def mode_value(raw: Any) -> Any:
    """The IntFlag value of a stored mode (an int; tolerate 'MEDUSA' or 'SpeculativeDecodingMode.MEDUSA')."""
    if isinstance(raw, str):
        name = raw.rsplit(".", 1)[-1].upper()
        return MODE_VALUES.get(name, raw)
    return raw


def _shown(key: str, value: Any) -> str:
    if key == "speculative_decoding_mode" and value in MODE_NAMES:
        return f"{value} ({MODE_NAMES[value]})"
    return repr(value)


def read_engine_config(engine: Path) -> dict:
    path = engine / "config.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise UserError(f"cannot read {show(path)} ({e}) — the engine build did not finish; rerun specbuild compile") \
            from None


def verify_engine(engine: Path, expect: dict[str, int], role: str) -> dict:
    """Compare build_config with `expect` (engine_limits). Returns the config; a UserError lists every mismatch."""
    cfg = read_engine_config(engine)
    build = cfg.get("build_config") or {}
    mismatches = []
    for key, want in expect.items():
        got = build.get(key)
        if key == "speculative_decoding_mode":
            got = mode_value(got)
        if got != want:
            mismatches.append(f"  build_config.{key}: the engine has {_shown(key, got)}, the recipe needs "
                              f"{_shown(key, want)} ({RECIPE_FIELD.get(key, key)})")
    world = ((cfg.get("pretrained_config") or {}).get("mapping") or {}).get("world_size", 1)
    missing = [f"rank{r}.engine" for r in range(int(world)) if not (engine / f"rank{r}.engine").is_file()]
    if missing:
        mismatches.append(f"  missing {', '.join(missing)} for world size {world}")
    if mismatches:
        raise UserError(f"the {role} engine {show(engine)} (TensorRT-LLM {cfg.get('version', '?')}) does not match the "
                        "recipe:\n" + "\n".join(mismatches) + "\n— this TensorRT-LLM built something else than the "
                        "command asked for; the engine is left for inspection and will be rebuilt by the next "
                        "specbuild compile. Check `specbuild doctor` and the build log in "
                        f"{show(engine.parent / 'logs')}")
    return cfg
