"""Engine folders over the shipped tiny zoo (checkpoints/tiny: trained target, draft, Medusa, EAGLE heads), shared
by the method-level tests that need drafts that are really accepted (lean vs transformers, penalties, adaptive)."""

from __future__ import annotations

import json
from pathlib import Path

# label: (recipe method, decoding options, max_draft_len, extra folders, pretrained extras (None: Medusa's))
METHODS = {
    "prompt_lookup": ("prompt_lookup", {"max_draft_len": 4, "max_matching_ngram_size": 3}, 4, {}, {}),
    "draft_target": ("draft_target", {"num_draft_tokens": 4}, 4, {}, {}),
    "medusa": (
        "medusa",
        {"medusa_choices": [[0], [1], [0, 0], [0, 1], [1, 0], [0, 0, 0]]},
        6,
        {"medusa": "medusa"},
        None,
    ),
    "eagle1": (
        "eagle",
        {"eagle_choices": [[0], [1], [0, 0], [0, 1], [0, 0, 0], [0, 0, 0, 0]]},
        6,
        {"eagle": "eagle"},
        {"num_eagle_layers": 4},
    ),
    "eagle2": (
        "eagle",
        {"eagle_use_dynamic_tree": True, "eagle_dynamic_tree_max_top_k": 2},
        7,
        {"eagle": "eagle"},
        {"num_eagle_layers": 4},
    ),
    "lookahead": (
        "lookahead",
        {"lookahead_window_size": 3, "lookahead_ngram_size": 3, "lookahead_verification_set_size": 2},
        9,
        {},
        {},
    ),
}


def medusa_pretrained(zoo: Path) -> dict:
    """The engine's pretrained_config extras for the zoo's Medusa heads (their count and depth, from their config)."""
    cfg = json.loads((zoo / "medusa" / "config.json").read_text())
    return {"num_medusa_heads": cfg["medusa_num_heads"], "num_medusa_layers": cfg["medusa_num_layers"]}


def has_extras(zoo: Path, extra: dict) -> bool:
    """Whether the zoo holds every extra folder (head) a method needs."""
    return all((zoo / v / "config.json").is_file() for v in extra.values())


def build_target(
    zoo: Path,
    folder: Path,
    *,
    method: str,
    decoding: dict,
    max_draft_len: int,
    extra: dict,
    pretrained: dict | None,
    limits: dict,
) -> Path:
    """One target engine folder over the zoo's target; `pretrained` None: the Medusa heads' extras."""
    from specbuild.reference.engine_folder import build_engine

    build_engine(
        folder,
        role="target",
        method=method,
        decoding=decoding,
        model_dir=zoo / "target",
        tokenizer_dir=zoo / "tokenizer",
        extra_dirs={k: zoo / v for k, v in extra.items()},
        dtype="float32",
        limits={**limits, "max_draft_len": max_draft_len},
        pretrained_extra=medusa_pretrained(zoo) if pretrained is None else pretrained,
    )
    return folder


def build_draft(zoo: Path, folder: Path, limits: dict) -> Path:
    """The draft engine folder (draft-target's second engine) over the zoo's draft model."""
    from specbuild.reference.engine_folder import build_engine

    build_engine(
        folder,
        role="draft",
        method="draft_target",
        model_dir=zoo / "draft",
        tokenizer_dir=zoo / "tokenizer",
        dtype="float32",
        limits={**limits, "max_draft_len": 0},
    )
    return folder
