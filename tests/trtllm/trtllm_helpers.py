"""Paths and helpers shared by the TensorRT-LLM runtime tests (a uniquely named module: test folders share sys.path)."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOUBLES = REPO / "tests" / "doubles"
PIPELINE = REPO / "pipeline"
EXAMPLES = DOUBLES / "trtllm_examples"


def leftovers(root: Path) -> list[str]:
    """Partial/old folders anywhere under root (none may stay after a failure)."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if ".partial-" in p.name or ".old-" in p.name)
