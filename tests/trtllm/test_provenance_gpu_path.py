"""provenance.json on the GPU path, through the TensorRT-LLM double: every engine folder, repository and the
deployment bundle `compile --no-validate` writes carries one, and it names the TensorRT-LLM that built them (here
the double's version: the manifest reads what is installed, it proves nothing of the real GPU build)."""

from __future__ import annotations

import json
from pathlib import Path

from specbuild.cli import main
from specbuild.cache.provenance import read_manifest
from specbuild.trtllm.version import installed


def test_every_output_of_a_gpu_compile_names_what_it_was_made_from(machine, write_recipe, tmp_path, capsys):
    recipe = write_recipe("eagle")
    code = main(
        [
            "compile",
            str(recipe),
            "--no-validate",
            "--json",
            "--engines-dir",
            str(tmp_path / "engines"),
            "--repo-dir",
            str(tmp_path / "triton_repo"),
        ]
    )
    out, err = capsys.readouterr()
    assert code == 0, err
    doc = json.loads(out)
    outputs = doc["outputs"]
    folders = {
        "engine": list(outputs["engines"].values()),
        "repository": [outputs["repository"], outputs["baseline_repository"]],
        "bundle": [outputs["deployment_bundle"]],
    }
    assert all(folders.values()) and not outputs["deployment_bundle"].startswith("none")
    for kind, paths in folders.items():
        for folder in paths:
            m = read_manifest(Path(folder))
            assert m["kind"] == kind
            assert m["versions"]["tensorrt_llm"] == installed().version
            assert m["recipe"]["text"] == recipe.read_text()
            assert {"model.checkpoint", "speculation.checkpoint"} <= set(m["checkpoints"])
            assert m["plan"]["outputs"]["deployment_bundle"] == outputs["deployment_bundle"]
    assert [s["name"] for s in doc["steps"]][0] == "engines" and doc["verdict"] == "built"
    # the bundle's copy of the repository leaves out the compiling machine's record (the bundle has its own)
    assert not (Path(outputs["deployment_bundle"]) / "repository" / "provenance.json").exists()
