"""report.json: every number the suite measured (ValidationResult.to_dict, strict JSON)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

FILE = "report.json"


def clean(value: Any) -> Any:
    """JSON-safe: tuples become lists, non-finite floats None, keys strings, paths strings."""
    if isinstance(value, dict):
        return {str(k): clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [clean(v) for v in value]
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, (str, int, bool)) or value is None:
        return value
    if hasattr(value, "item"):  # numpy scalars
        return clean(value.item())
    return str(value)


def write_json(result, folder: Path) -> Path:
    path = folder / FILE
    path.write_text(json.dumps(clean(result.to_dict()), indent=2, allow_nan=False) + "\n", encoding="utf-8")
    return path
