"""Adaptive speculation through the served repository (the real CPU tritonserver): the recipe's
`adaptive.draft_len_schedule` reaches the BLS (draft-target: `draft_len_schedule` parameter of tensorrt_llm_bls,
drafts per round from the rows in flight) and the reference core (EAGLE: parameter of tensorrt_llm, drafts per step
from the requests in flight).

Schedule {1: full, 2: 0}: a request alone drafts; several at once decode plainly while they overlap. Checked:
concurrent outputs equal the same requests sent one by one (lossless), and the drafts counted by the server
(return_perf_metrics total_draft_tokens) fall under load while a lone request still drafts.
"""

from __future__ import annotations

import json
import threading
import urllib.request

import pytest
from repo_helpers import ROOT

from specbuild.plan import Layout
from specbuild.recipe.schema import Recipe
from specbuild.runtimes.build import resolve_build
from specbuild.methods import describe
from specbuild.runtimes import runtime_for

pytestmark = pytest.mark.timeout(900)

PROMPTS = [
    "def add(a, b):\n    return a + b\n\ndef sub(a, b):",
    "import os\nimport sys\n\ndef main():",
    "class Point:\n    def __init__(self, x, y):",
    "for i in range(10):\n    print(i)\n",
]
MAX_TOKENS = 24
CASES = {  # label: (speculation section, the model clients call, the schedule's full length)
    "draft_target": ({"method": "draft_target", "checkpoint": "{draft}", "num_draft_tokens": 3}, "tensorrt_llm_bls", 3),
    "eagle": (
        {
            "method": "eagle",
            "checkpoint": "{eagle}",
            "num_eagle_layers": 3,
            "max_draft_len": 5,
            "max_non_leaves_per_layer": 2,
            "choices": [[0], [0, 0], [0, 0, 0], [1], [0, 1]],
        },
        "ensemble",
        5,
    ),
}


@pytest.fixture(scope="module", params=list(CASES))
def served(request, tmp_path_factory):
    import torch

    from specbuild.compile import build_engines
    from specbuild.serve import TritonServer
    from specbuild.repository.engine.writer import write_repository

    torch.set_num_threads(1)
    shipped = ROOT / "checkpoints" / "tiny"
    if not all((shipped / name / "config.json").is_file() for name in ("target", "draft", "eagle")):
        pytest.skip("checkpoints/tiny is not in this checkout")
    label = request.param
    section, model, full = CASES[label]
    section = {
        k: v.format(draft=shipped / "draft", eagle=shipped / "eagle") if isinstance(v, str) else v
        for k, v in section.items()
    }
    recipe = Recipe.model_validate(
        {
            "name": f"adaptive-{label}",
            "runtime": "reference",
            "model": {"checkpoint": str(shipped / "target"), "dtype": "float32"},
            "speculation": section,
            "build": {"max_batch_size": 4, "max_input_len": 96, "max_seq_len": 160},
            "triton": {"streaming": True},
            "validation": {"require_lossless": False},
            "adaptive": {"draft_len_schedule": {1: full, 2: 0}},
        }
    )
    from specbuild.recipe.loader import file_findings, general_findings

    assert list(general_findings(resolve_build(recipe))) == [] and list(file_findings(resolve_build(recipe))) == []
    root = tmp_path_factory.mktemp(f"adaptive-{label}")
    layout = Layout(root / "engines", root / "triton_repo", root / "reports", recipe.name)
    build_engines(resolve_build(recipe), layout)
    repo = write_repository(recipe, describe(recipe), layout, flavour=runtime_for(recipe))
    with TritonServer(repo, log_path=root / "tritonserver.log", exit_timeout_s=1) as server:
        yield label, model, repo, server


def generate(server, model: str, prompt: str) -> dict:
    body = {
        "text_input": prompt,
        "max_tokens": MAX_TOKENS,
        "exclude_input_in_output": True,
        "return_perf_metrics": True,
    }
    req = urllib.request.Request(
        f"{server.http_url}/v2/models/{model}/generate",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read().decode())


def test_the_schedule_is_in_the_repository(served):
    label, _, repo, _ = served
    holder = "tensorrt_llm_bls" if label == "draft_target" else "tensorrt_llm"
    config = (repo / holder / "config.pbtxt").read_text()
    full = CASES[label][2]
    assert f'key: "draft_len_schedule"\n  value {{\n    string_value: "1:{full},2:0"' in config
    assert (repo / "tensorrt_llm_bls" / "1" / "draft_len_schedule.py").is_file()


def test_drafts_follow_the_load_and_stay_lossless(served):
    label, model, _, server = served
    alone = [generate(server, model, p) for p in PROMPTS]
    drafted_alone = sum(int(r["total_draft_tokens"]) for r in alone)
    assert drafted_alone > 0, f"{label}: a lone request drafted nothing"
    together: dict[int, dict] = {}

    def send(i: int) -> None:
        together[i] = generate(server, model, PROMPTS[i])

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(PROMPTS))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [together[i]["output_ids"] for i in range(len(PROMPTS))] == [r["output_ids"] for r in alone], (
        f"{label}: concurrent outputs differ from the same requests sent one by one"
    )
    drafted_together = sum(int(together[i]["total_draft_tokens"]) for i in range(len(PROMPTS)))
    assert drafted_together < drafted_alone / 2, (
        f"{label}: {drafted_together} drafts with {len(PROMPTS)} requests in flight vs {drafted_alone} one by one"
    )
