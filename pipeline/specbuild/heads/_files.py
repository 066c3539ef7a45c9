"""Small file helpers shared by the heads loaders (no torch at import)."""

from __future__ import annotations

import json
from pathlib import Path

from specbuild.errors import UserError


def read_config(folder: Path, what: str) -> dict:
    """Read `<folder>/config.json` as a dict, or raise a UserError that names the file."""
    path = Path(folder) / "config.json"
    if not Path(folder).is_dir():
        raise UserError(f"{what} folder {folder} does not exist: point to the folder that holds config.json.")
    if not path.is_file():
        raise UserError(f"{path}: missing; a {what} folder needs a config.json next to its weights.")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise UserError(f"{path}: not valid JSON ({e}); fix or regenerate the file.") from e


def require_key(config: dict, key: str, path: Path) -> object:
    if key not in config:
        raise UserError(f"{path}: key '{key}' is missing; add it (see docs for the {path.parent.name} layout).")
    return config[key]


def write_json(path: Path, data: dict) -> None:
    Path(path).write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
