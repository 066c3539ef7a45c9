"""Manifests as YAML text and back (ruamel.yaml, a core dependency): block style, multi-line strings as literal
blocks so the scripts in commands and ConfigMaps read as scripts."""

from __future__ import annotations

import io
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.scalarstring import LiteralScalarString


def _literal(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _literal(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_literal(v) for v in value]
    if isinstance(value, str) and "\n" in value:
        return LiteralScalarString(value)
    return value


def dump_all(docs: list[dict], header: str = "") -> str:
    yaml = YAML()
    yaml.default_flow_style = False
    yaml.width = 4096
    yaml.indent(mapping=2, sequence=4, offset=2)
    out = io.StringIO()
    if header:
        out.write("".join(f"# {line}\n" if line else "#\n" for line in header.splitlines()))
    yaml.dump_all([_literal(d) for d in docs], out)
    return out.getvalue()


def load_all(text: str) -> list[dict]:
    """Every non-empty document as plain dicts and lists."""
    return [d for d in YAML(typ="safe", pure=True).load_all(text) if d is not None]
