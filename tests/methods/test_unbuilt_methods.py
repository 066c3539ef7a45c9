"""DFlash and DSpark (TensorRT-LLM 1.3's decoding types DFlash / DSpark, llm_args.py@0004396): specbuild has no head
format for their drafts and no trainer, so `check` refuses them by name, with the reason and what to use instead
(exit code 2), instead of calling them unknown or reading them as the closest known method."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("method", "upstream"), [("dflash", "DFlash"), ("DSpark", "DSpark"), ("d-flash", "DFlash")])
def test_check_refuses_them_with_the_reason(tmp_path, capsys, method, upstream):
    from specbuild.cli import main

    data = yaml.safe_load((REPO / "recipes" / "reference" / "llmapi_eagle3.yaml").read_text())
    data["model"]["checkpoint"] = str((REPO / "recipes" / "reference" / data["model"]["checkpoint"]).resolve())
    data["validation"].pop("prompts", None)
    data["speculation"] = {"method": method, "checkpoint": "heads/dflash", "max_draft_len": 4}
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(data))
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"'{method}' is TensorRT-LLM's {upstream} (decoding_type {upstream}" in err, err
    assert "no head format for its draft" in err and "no trainer" in err
    assert "use eagle3" in err and "or pard" in err
    assert "speculation.method" in err
    assert "read as method" not in err and "did you mean" not in err  # no stand-in, no guess
