"""PARD on the reference executor over the tiny zoo's PARD draft: lossless against autoregressive decoding (batched,
with a draft-length schedule) with drafts accepted; the same tokens as the plain function (methods/pard/decoder.py)
and, at every step that drafted all K, the same acceptance; a draft without the mask id is refused."""

from __future__ import annotations

import inspect
import json

import pytest
from zoo_engines import build_target

LIMITS = dict(max_batch_size=4, max_input_len=96, max_seq_len=192, max_num_tokens=2048)


@pytest.fixture(scope="module")
def engines(shipped_tiny, tmp_path_factory):
    from specbuild.reference.engine_folder import build_engine

    if not (shipped_tiny / "pard" / "config.json").is_file():
        pytest.skip(f"{shipped_tiny} has no pard/ stage")
    root = tmp_path_factory.mktemp("pard")
    mask = json.loads((shipped_tiny / "pard" / "config.json").read_text())["pard_token"]
    common = dict(extra={}, pretrained={}, limits=LIMITS)
    folders = {
        "none": build_target(shipped_tiny, root / "none", method="none", decoding={}, max_draft_len=0, **common),
        "pard": build_target(
            shipped_tiny,
            root / "pard",
            method="pard",
            decoding={"max_draft_len": 4, "mask_token_id": mask},
            max_draft_len=4,
            **common,
        ),
        "scheduled": build_target(
            shipped_tiny,
            root / "scheduled",
            method="pard",
            decoding={"max_draft_len": 4, "mask_token_id": mask, "draft_len_schedule": "1:4,2:2,3:0"},
            max_draft_len=4,
            **common,
        ),
    }
    for name, model in (("pard_draft", "pard"), ("ar_draft", "draft")):
        build_engine(
            root / name,
            role="draft",
            method="draft_target",
            model_dir=shipped_tiny / model,
            tokenizer_dir=shipped_tiny / "tokenizer",
            dtype="float32",
            limits={**LIMITS, "max_draft_len": 0},
        )
        folders[name] = root / name
    return folders, mask


@pytest.fixture(scope="module")
def prompts(shipped_tiny):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(shipped_tiny / "tokenizer")
    source = inspect.getsource(json)
    return [tok(source[i * 800 : i * 800 + 800])["input_ids"][:72] for i in range(4)]


def run(folders, target, prompts, draft="pard_draft", **sampling):
    import torch

    from specbuild.reference.decoder.executor import Executor
    from specbuild.reference.decoder.request import Request
    from specbuild.reference.decoder.sampling import SamplingConfig
    from specbuild.reference.engine_folder import load_engine

    torch.set_num_threads(1)
    ex = Executor(load_engine(folders[target]), load_engine(folders[draft]) if target != "none" else None)
    config = SamplingConfig(**sampling) if sampling else SamplingConfig()
    lengths = (12, 20, 28, 40)
    return ex.run([Request(input_ids=p, max_new_tokens=n, sampling=config) for p, n in zip(prompts, lengths)])


@pytest.mark.parametrize("target", ["pard", "scheduled"])
def test_lossless_batched_and_accepted(engines, prompts, target):
    folders, _ = engines
    plain = [r.output_ids for r in run(folders, "none", prompts)]
    results = run(folders, target, prompts)
    assert [r.output_ids for r in results] == plain
    assert sum(r.stats.total_accepted_draft_tokens for r in results) > 0


def test_the_executor_matches_the_plain_function(engines, prompts, shipped_tiny):
    from specbuild.reference.decoder.model import CausalLM
    from specbuild.methods.pard.decoder import pard_generate

    folders, mask = engines
    one = run(folders, "pard", prompts[:1])[0]
    plain = pard_generate(
        CausalLM.from_pretrained(shipped_tiny / "target"),
        CausalLM.from_pretrained(shipped_tiny / "pard"),
        prompts[:1],
        max_new_tokens=12,
        max_draft_len=4,
        mask_token_id=mask,
    )
    assert one.output_ids == plain.outputs[0]
    # the executor drafts fewer near the end (never past what the request may still generate); where both drafted K,
    # step for step the same acceptance
    full = [i for i, d in enumerate(one.stats.drafted_per_step) if d == 4]
    assert full and all(one.stats.accepted_per_step[i] == plain.accepted_per_step[0][i] for i in full)


def test_a_draft_without_the_mask_id_is_refused_for_another_vocabulary(engines, prompts):
    from specbuild.errors import UserError

    folders, _ = engines
    with pytest.raises(UserError, match="mask_token_id=4096 is outside the draft's vocabulary"):
        run(folders, "pard", prompts, draft="ar_draft")
