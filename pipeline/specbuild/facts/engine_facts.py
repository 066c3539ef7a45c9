"""Engine facts, written once: the speculative-decoding mode values, the limits rule, reading an engine folder.

Both runtimes write and read the same engine `config.json` (design contract "Engine folder config.json"):
TensorRT-LLM's `trtllm-build` writes it on a GPU, the reference builder writes the same shape on a CPU. Every
piece of code that predicts, writes, reads or verifies an engine's limits calls this module.
"""

from __future__ import annotations

import enum
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from specbuild.errors import UserError
from specbuild.files.paths import show

CONFIG = "config.json"
DEFAULT_MAX_NUM_TOKENS = 8192  # BuildConfig default (TensorRT-LLM tensorrt_llm/builder.py)


class SpecMode(enum.IntFlag):
    """TensorRT-LLM's `SpeculativeDecodingMode` (tensorrt_llm/models/modeling_utils.py):
    stored as an int in build_config; `cli_name` is trtllm-build's `--speculative_decoding_mode` value."""

    NONE = 1
    DRAFT_TOKENS_EXTERNAL = 2
    MEDUSA = 4
    LOOKAHEAD_DECODING = 8
    EXPLICIT_DRAFT_TOKENS = 16
    EAGLE = 32

    @property
    def cli_name(self) -> str:
        return self.name.lower()

    @classmethod
    def parse(cls, raw: Any) -> "SpecMode | Any":
        """The mode of a stored value: an int, 'MEDUSA' or 'SpeculativeDecodingMode.MEDUSA'; other values are
        returned unchanged (so a mismatch message can show them)."""
        if isinstance(raw, str):
            name = raw.rsplit(".", 1)[-1].upper()
            return cls[name] if name in cls.__members__ else raw
        try:
            return cls(int(raw))
        except (TypeError, ValueError):
            return raw

    def describe(self) -> str:
        return f"{int(self)} ({self.name})"


# The recipe field each build_config limit comes from (for messages).
RECIPE_FIELD = {
    "max_batch_size": "build.max_batch_size",
    "max_input_len": "build.max_input_len",
    "max_seq_len": "build.max_seq_len (+ max_draft_len, + num_eagle_layers for EAGLE)",
    "max_num_tokens": "build.max_num_tokens (clipped and raised as trtllm-build does)",
    "max_beam_width": "build.max_beam_width",
    "max_draft_len": "speculation.max_draft_len (0 for a plain engine)",
    "speculative_decoding_mode": "speculation.method",
}


@dataclass(frozen=True)
class EngineLimits:
    """The build_config limits of one engine, as trtllm-build writes them (TensorRT-LLM tensorrt_llm/commands/build.py,
    tensorrt_llm/builder.py)."""

    max_batch_size: int
    max_input_len: int
    max_seq_len: int  # includes the speculative slack (max_draft_len [+ num_eagle_layers])
    max_num_tokens: int
    max_beam_width: int
    max_draft_len: int
    speculative_decoding_mode: SpecMode
    requested_max_seq_len: int  # what a request may use (prompt + new tokens): not a build_config key

    def as_build_config(self) -> dict[str, int]:
        out = {k: v for k, v in asdict(self).items() if k != "requested_max_seq_len"}
        out["speculative_decoding_mode"] = int(self.speculative_decoding_mode)
        return out


def seq_len_slack(mode: SpecMode, max_draft_len: int, extra_seq_len: int) -> int:
    """Tokens trtllm-build adds to max_seq_len: max_draft_len, plus num_eagle_layers for EAGLE
    (tensorrt_llm/builder.py `build`)."""
    if mode == SpecMode.NONE:
        return 0
    return max_draft_len + (extra_seq_len if mode == SpecMode.EAGLE else 0)


def built_limits(
    *,
    max_batch_size: int,
    max_input_len: int,
    max_seq_len: int,
    max_num_tokens: int | None,
    tokens_per_block: int,
    max_beam_width: int,
    mode: SpecMode,
    max_draft_len: int,
    extra_seq_len: int = 0,
) -> EngineLimits:
    """What trtllm-build writes for these requested values (tensorrt_llm/builder.py: check_max_num_tokens clips
    max_num_tokens to max_batch_size * max_seq_len before max_draft_len is added and raises it to
    tokens_per_block; a speculative engine then raises it to max_batch_size * (max_draft_len + 1), and
    max_seq_len grows by the speculative slack)."""
    speculative = mode != SpecMode.NONE
    draft_len = max_draft_len if speculative else 0
    tokens = min(max_num_tokens or DEFAULT_MAX_NUM_TOKENS, max_batch_size * max_seq_len)
    tokens = max(tokens, tokens_per_block)
    if speculative:
        tokens = max(tokens, max_batch_size * (draft_len + 1))
    return EngineLimits(
        max_batch_size=max_batch_size,
        max_input_len=max_input_len,
        max_seq_len=max_seq_len + seq_len_slack(mode, draft_len, extra_seq_len),
        max_num_tokens=tokens,
        max_beam_width=max_beam_width,
        max_draft_len=draft_len,
        speculative_decoding_mode=mode,
        requested_max_seq_len=max_seq_len,
    )


def limits_from_config(config: dict) -> EngineLimits:
    """The limits an engine folder's config.json records (the speculative slack worked out from its mode)."""
    build = config.get("build_config") or {}
    try:
        mode = SpecMode.parse(build.get("speculative_decoding_mode", 1))
        if not isinstance(mode, SpecMode):
            raise ValueError(f"speculative_decoding_mode {build.get('speculative_decoding_mode')!r}")
        draft_len = int(build.get("max_draft_len", 0))
        extra = int((config.get("pretrained_config") or {}).get("num_eagle_layers", 0))
        max_seq_len = int(build["max_seq_len"])
        return EngineLimits(
            max_batch_size=int(build["max_batch_size"]),
            max_input_len=int(build["max_input_len"]),
            max_seq_len=max_seq_len,
            max_num_tokens=int(build["max_num_tokens"]),
            max_beam_width=int(build.get("max_beam_width", 1)),
            max_draft_len=draft_len,
            speculative_decoding_mode=mode,
            requested_max_seq_len=max_seq_len - seq_len_slack(mode, draft_len, extra),
        )
    except (KeyError, TypeError, ValueError) as e:
        raise UserError(
            f"build_config is incomplete or malformed ({e}) — rebuild the engine with specbuild compile"
        ) from None


def limit_mismatches(config: dict, expect: EngineLimits, keys: tuple[str, ...] | None = None) -> list[str]:
    """`build_config.<key>: the engine has X, the recipe needs Y (field)` for every differing limit."""
    build = config.get("build_config") or {}
    want = expect.as_build_config()
    out = []
    for key in keys or tuple(want):
        got = build.get(key, 0 if key == "max_draft_len" else None)
        need = want[key]
        if key == "speculative_decoding_mode":
            got = SpecMode.parse(got)
            same = got == need
            shown_got = got.describe() if isinstance(got, SpecMode) else repr(got)
            shown_need = SpecMode(need).describe()
        else:
            try:
                same = got is not None and int(got) == int(need)
            except (TypeError, ValueError):
                same = False
            shown_got, shown_need = repr(got), repr(need)
        if not same:
            out.append(
                f"build_config.{key}: the engine has {shown_got}, the recipe needs {shown_need} "
                f"({RECIPE_FIELD.get(key, key)})"
            )
    return out


def read_engine_config(engine_dir: Path) -> dict:
    """An engine folder's config.json (either runtime's), checked to have a build_config section."""
    path = Path(engine_dir) / CONFIG
    try:
        config = json.loads(path.read_text())
    except FileNotFoundError:
        raise UserError(
            f"{show(path)}: no engine config — build the engines first (specbuild compile), or point "
            "--engines-dir at the folder that holds them"
        ) from None
    except (OSError, ValueError) as e:
        raise UserError(f"{show(path)}: unreadable engine config ({e}) — rebuild the engine") from None
    if not isinstance(config, dict) or not isinstance(config.get("build_config"), dict):
        raise UserError(
            f"{show(path)}: no build_config section — this is not a TensorRT-LLM/specbuild engine folder; "
            "rebuild the engine"
        )
    return config


def verify_engine(engine_dir: Path, expect: EngineLimits, role: str, *, after: str = "") -> dict:
    """Compare an engine's build_config with what the recipe asks for; a UserError lists every mismatch."""
    config = read_engine_config(engine_dir)
    mismatches = limit_mismatches(config, expect)
    if mismatches:
        raise UserError(
            f"the {role} engine {show(engine_dir)} ({config.get('version', '?')}) does not match the "
            "recipe:\n" + "\n".join(f"  {m}" for m in mismatches) + f"\n— {after or 'rebuild it'}"
        )
    return config


def expected_limits(recipe, spec, role: str) -> EngineLimits:
    """The limits the engine of `role` (target | draft | baseline) must carry for this recipe: only the target
    carries speculation; draft and baseline engines are plain builds of the same limits."""
    b = recipe.build
    speculative = role == "target" and spec.mode not in (None, SpecMode.NONE)
    return built_limits(
        max_batch_size=b.max_batch_size,
        max_input_len=b.max_input_len,
        max_seq_len=b.max_seq_len,
        max_num_tokens=b.max_num_tokens,
        tokens_per_block=b.tokens_per_block,
        max_beam_width=b.max_beam_width,
        mode=spec.mode if speculative else SpecMode.NONE,
        max_draft_len=spec.max_draft_len if speculative else 0,
        extra_seq_len=spec.extra_seq_len if speculative else 0,
    )
