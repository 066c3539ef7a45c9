"""adapt through the other draft kinds' runtime paths on the tiny zoo, one step each: EAGLE-3 on the llm-api
flavour (the CPU rehearsal's model.yaml), the draft model of draft-target (its own engine) and Medusa heads: the
teacher pass, the gate's decode and the written head, whatever the verdict."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specbuild.cli import main

ROOT = Path(__file__).resolve().parents[2]
RECIPES = ROOT / "recipes" / "reference"


@pytest.fixture(scope="module")
def traffic(tmp_path_factory):
    import torch

    torch.set_num_threads(1)
    path = tmp_path_factory.mktemp("traffic") / "traffic.jsonl"
    lines = []
    for i in range(6):
        lines.append(json.dumps({"category": "code", "prompt": f"def g{i}(items):\n    for item in items:\n"}))
        lines.append(json.dumps({"category": "text", "prompt": f"import os\nprint({i})\n"}))
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize(
    "recipe,files",
    [
        ("llmapi_eagle3.yaml", {"config.json", "model.safetensors"}),
        ("draft_target.yaml", {"config.json", "model.safetensors"}),
        ("medusa.yaml", {"config.json", "medusa_lm_head.safetensors"}),
    ],
)
def test_a_kind_adapts_end_to_end(recipe, files, traffic, tmp_path):
    out = tmp_path / "out"
    code = main(
        ["adapt", str(RECIPES / recipe), "--traffic", str(traffic), "--out", str(out), "--max-steps", "1"]
        + ["--cache-dir", str(tmp_path / "cache")]
    )
    a = json.loads((out / "adapt.json").read_text())
    assert code == (0 if a["shipped"] else 1), a["reason"]
    report = json.loads((out / "report.json").read_text())
    assert report["training"]["steps"] == 1
    assert a["overall"]["before"]["al"] >= 1.0 and a["overall"]["held_out"] == len(report["held_out"]) > 0
    assert all(r["old"]["output_ids"] == r["new"]["output_ids"] for r in report["held_out"]) or not a["shipped"]
    written = out / ("head" if a["shipped"] else "candidate")
    if written.is_dir():  # no folder when early stopping kept the current head (step 0 measured best)
        assert files <= {p.name for p in written.iterdir()}
    else:
        assert "no weights measured better" in a["reason"]
