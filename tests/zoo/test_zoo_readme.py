"""A zoo folder's README (zoo/readme.py), rendered from a build summary: what each part accepts, and which EAGLE-3
capture layers a user must name (TensorRT-LLM's default set {1, L//2-1, L-4}, heads/eagle3.py)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from specbuild.zoo.readme import render_readme

TINY = Path(__file__).resolve().parents[2] / "checkpoints" / "tiny" / "manifest.json"


@pytest.fixture
def summary() -> dict:
    return json.loads(TINY.read_text())


def with_shape(summary: dict, layers: int, captured: list[int]) -> dict:
    s = copy.deepcopy(summary)
    s["profile_config"]["target"]["layers"] = layers
    s["models"]["eagle3"]["layers_to_capture"] = captured
    return s


def test_what_each_part_accepts(summary):
    text = render_readme(summary)
    assert "## What each part accepts" in text
    assert "this target only (hidden size 256, vocabulary 4096)" in text
    assert "2048 positions (trained on 256-token blocks)" in text


@pytest.mark.parametrize(
    "layers, captured, says",
    [
        (4, [0, 1, 3], "does not apply (it needs L > 5)"),
        (
            12,
            [1, 5, 8],
            "These are TensorRT-LLM's default capture set {1, L//2-1, L-4} for this 12-layer target, so "
            "`eagle3_layers_to_capture` may be left out",
        ),
        (12, [0, 1, 3], "TensorRT-LLM's default capture set for this 12-layer target would be [1, 5, 8], not these"),
    ],
)
def test_eagle3_capture_layers_are_explained_for_the_target_depth(summary, layers, captured, says):
    text = render_readme(with_shape(summary, layers, captured))
    assert says in text and f"eagle3_layers_to_capture: {captured}" in text
