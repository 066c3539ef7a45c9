"""The suffix automaton (SA), PARD and AUTO served end to end on the CPU from their example recipes
(recipes/reference/llmapi_{suffix_automaton,pard,auto}.yaml): the repository specbuild writes for the LLM-API
flavour, served by nvidia-pytriton's tritonserver with specbuild's model.py (model.yaml read as TensorRT-LLM reads
it), checked by the suite against the baseline: health, lossless, acceptance. AUTO serves what TensorRT-LLM's
heuristic picks (NGram), and the server's log says so."""

from __future__ import annotations

from pathlib import Path

import pytest

from specbuild.methods import describe
from specbuild.plan import Layout
from specbuild.recipe import load_recipe
from specbuild.runtimes.build import resolve_build
from specbuild.validate import Endpoints, SuiteOptions, run_validation

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "checkpoints" / "tiny"
pytestmark = [
    pytest.mark.timeout(900),
    pytest.mark.skipif(not (TINY / "pard" / "config.json").is_file(), reason="checkpoints/tiny (pard/) not built"),
]
PROMPTS = ["def add(a, b):\n    return", "x = [1, 2, 3]\ny = [1, 2,", "class Stack:\n    def push(self, item):"]
OPTIONS = SuiteOptions(checks=("health", "lossless", "acceptance"), requests_per_level=2)


@pytest.fixture(scope="module")
def baseline(tmp_path_factory):
    """One baseline for the three (the same target, model.yaml without speculative_config)."""
    from specbuild.runtimes import runtime_for
    from specbuild.serve import TritonServer

    recipe = recipe_for("suffix_automaton")
    root = tmp_path_factory.mktemp("baseline")
    layout = Layout(root / "engines", root / "triton_repo", root / "reports", recipe.name)
    repo = runtime_for(recipe).write_repository(recipe, describe(recipe), layout, "baseline")
    server = TritonServer(repo, log_path=root / "tritonserver.log", exit_timeout_s=1).start()
    try:
        yield server
    finally:
        server.stop()


def recipe_for(method: str):
    recipe = load_recipe(ROOT / "recipes" / "reference" / f"llmapi_{method}.yaml")
    validation = recipe.validation.model_copy(
        update={"prompts": PROMPTS, "max_tokens": 16, "concurrency": [1, 2], "min_acceptance_length": 1.0}
    )
    return recipe.model_copy(update={"validation": validation})


@pytest.mark.parametrize("method", ["suffix_automaton", "pard", "auto"])
def test_the_method_is_served_lossless_with_drafts_accepted(method, baseline, tmp_path):
    import torch

    from specbuild.runtimes import runtime_for
    from specbuild.serve import TritonServer

    torch.set_num_threads(1)
    recipe = recipe_for(method)
    layout = Layout(tmp_path / "engines", tmp_path / "triton_repo", tmp_path / "reports", recipe.name)
    repo = runtime_for(recipe).write_repository(recipe, describe(recipe), layout, "target")
    log = tmp_path / "tritonserver.log"
    server = TritonServer(repo, log_path=log, exit_timeout_s=1).start()
    try:
        result = run_validation(resolve_build(recipe), Endpoints.of(server), Endpoints.of(baseline), options=OPTIONS)
    finally:
        server.stop()
    summaries = {c.name: (c.status, c.summary) for c in result.checks}
    for name in ("health", "lossless", "acceptance"):
        assert summaries[name][0] == "passed", (name, summaries[name])
    acceptance = result.check("acceptance").details
    assert acceptance["draft_tokens"] > 0 and acceptance["accepted_draft_tokens"] > 0
    if method == "auto":  # the heuristic's choice for max_batch_size 4, named where the model loads
        assert "AUTO runs {decoding_type: NGram, max_draft_len: 5, max_matching_ngram_size: 3" in log.read_text()
        assert result.build["runs"].startswith("AUTO runs NGram: 5 drafts"), result.build.get("runs")  # the report's
    else:
        assert "runs" not in result.build
