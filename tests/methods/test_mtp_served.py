"""MTP served end to end on the CPU: the llm-api repository of recipes/reference/llmapi_mtp.yaml (model.yaml with
decoding_type MTP over the tiny zoo's DeepseekV3 target and its MTP layer) and its baseline, each served by the
bundled tritonserver with specbuild's llm-api model, then the suite's health, lossless and acceptance checks on three
prompts: identical to the baseline, drafts accepted (the core's per-request counters)."""

from __future__ import annotations

from pathlib import Path

import pytest

from specbuild.methods import describe
from specbuild.plan import Layout
from specbuild.recipe import load_recipe
from specbuild.runtimes.build import resolve_build
from specbuild.validate import Endpoints, SuiteOptions, run_validation

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "recipes" / "reference" / "llmapi_mtp.yaml"
PROMPTS = ["def add(a, b):\n    return", "import os\nimport sys\n\n\ndef main(argv):\n    ", "class Stack:\n    def"]
pytestmark = [pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    import torch

    from specbuild.runtimes import runtime_for
    from specbuild.serve import TritonServer

    torch.set_num_threads(1)
    recipe = load_recipe(RECIPE)
    recipe = recipe.model_copy(
        update={
            "validation": recipe.validation.model_copy(update={"prompts": PROMPTS, "max_tokens": 24}),
            "build": recipe.build.model_copy(update={"max_batch_size": 4, "max_input_len": 128, "max_seq_len": 256}),
        }
    )
    root = tmp_path_factory.mktemp("mtp-served")
    layout = Layout(root / "engines", root / "triton_repo", root / "reports", recipe.name)
    servers = {}
    try:
        for role in ("target", "baseline"):
            repo = runtime_for(recipe).write_repository(recipe, describe(recipe), layout, role)
            servers[role] = TritonServer(repo, log_path=root / f"tritonserver-{role}.log", exit_timeout_s=1).start()
        yield recipe, servers
    finally:
        for server in servers.values():
            server.stop()


def test_mtp_is_served_losslessly_with_drafts_accepted(served, tmp_path):
    recipe, servers = served
    result = run_validation(
        resolve_build(recipe),
        Endpoints.of(servers["target"]),
        Endpoints.of(servers["baseline"]),
        report_dir=tmp_path / "report",
        options=SuiteOptions(checks=["health", "lossless", "acceptance"], requests_per_level=1),
    )
    status = {c.name: (c.status, c.summary) for c in result.checks}
    for name in ("health", "lossless", "acceptance"):
        assert status[name][0] == "passed", (name, status[name])
    assert "3/3 prompts identical" in status["lossless"][1]
    acceptance = result.check("acceptance").details
    assert acceptance["draft_tokens"] > 0 and acceptance["accepted_draft_tokens"] > 0
    assert acceptance["mean_acceptance_length"] > 1.2, acceptance["mean_acceptance_length"]
