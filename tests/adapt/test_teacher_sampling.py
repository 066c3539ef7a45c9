"""The traffic's sampling settings in the teacher pass (specbuild.adapt.sampling): read from request records, the
OpenAI defaults for what a request leaves out, greedy when it gives none, seeded (the same draw again, another seed
another draw), the request's max_tokens as the answer limit; the held-out part stays greedy."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specbuild.adapt.sampling import TeacherSampling, derived_seed, teacher_sampling
from specbuild.recipe.prompt_records import RecordProblem, RequestSampling, parse_record

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "checkpoints" / "tiny"


def request(**fields) -> dict:
    return {"model": "m", "messages": [{"role": "user", "content": "hi"}], **fields}


def test_request_records_carry_their_sampling_and_validate_still_names_it_ignored():
    fmt, fields = parse_record(request(temperature=0.7, top_p=0.9, seed=5, max_tokens=40, user="u1"))
    assert fmt == "request" and fields["sampling"] == RequestSampling(temperature=0.7, top_p=0.9, seed=5, max_tokens=40)
    assert set(fields["ignored"]) == {
        "temperature",
        "top_p",
        "seed",
        "max_tokens",
        "user",
    }  # the suite decodes greedily
    _, batch = parse_record({"custom_id": "r1", "body": request(temperature=0.2)})
    assert batch["sampling"].temperature == 0.2 and batch["id"] == "r1"
    assert parse_record(request())[1]["sampling"] is None
    assert parse_record({"prompt": "x", "temperature": 0.5})[1].get("sampling") is None  # only requests ask
    with pytest.raises(RecordProblem, match="temperature"):
        parse_record(request(temperature="hot"))


def test_the_rules_of_a_teacher_request():
    def rule(**fields):
        return teacher_sampling(RequestSampling(**fields) if fields else None, "d1", seed=0, max_tokens=32)

    assert rule() == (None, 32)
    assert rule(max_tokens=8, seed=3) == (None, 8)  # no decoding setting: greedy, within the request's limit
    assert rule(max_completion_tokens=100) == (None, 32)  # never past adapt.max_tokens
    assert rule(temperature=0.0, top_p=0.5) == (None, 32) and rule(top_k=1, temperature=0.9) == (None, 32)
    sampled, limit = rule(top_p=0.8)
    assert limit == 32 and sampled == TeacherSampling(1.0, 0.8, 0, derived_seed(0, "d1"))  # OpenAI's temperature 1
    assert rule(temperature=0.5, seed=11)[0].seed == 11
    assert derived_seed(0, "d1") != derived_seed(0, "d2") and derived_seed(0, "d1") != derived_seed(1, "d1")


@pytest.fixture(scope="module")
def runtime(tmp_path_factory):
    import torch

    from specbuild.adapt.runtimes import adapt_runtime
    from specbuild.load import load_build

    torch.set_num_threads(1)
    build = load_build(ROOT / "recipes" / "reference" / "eagle.yaml")
    rt = adapt_runtime(build, tmp_path_factory.mktemp("work"))
    yield build, rt
    rt.close()


def test_the_reference_runtime_samples_seeded_and_within_the_limit(runtime):
    build, rt = runtime
    from specbuild.checkpoints.client_tokenizer import load_tokenizer

    tokenizer = load_tokenizer(build.recipe.tokenizer_dir)
    prompts = [tokenizer.encode(p) for p in ("def parse(line):\n", "import os\n\ndef walk(")]
    hot = TeacherSampling(temperature=1.5, top_p=1.0, top_k=0, seed=7)

    def decode(sampling, limits=None):
        return [d.output_ids for d in rt.decode(build.spec, prompts, 16, end_id=None, sampling=sampling, limits=limits)]

    greedy = decode(None)
    one = decode([hot, hot], [16, 5])
    assert one == decode([hot, hot], [16, 5])  # seeded: the same draw again
    assert len(one[1]) <= 5 and one[0] != greedy[0]
    other = decode([TeacherSampling(1.5, 1.0, 0, 8), None])
    assert other[0] != one[0] and other[1] == greedy[1]  # another seed, another draw; None stays greedy


def test_adapt_answers_training_prompts_as_asked_and_judges_greedily(tmp_path):
    from specbuild.cache.step_store import Store
    from specbuild.cli import main

    recipe = tmp_path / "r.yaml"
    text = (ROOT / "recipes" / "reference" / "eagle.yaml").read_text()
    text = text.replace("../../checkpoints", str(ROOT / "checkpoints")).replace(
        "../prompts", str(ROOT / "recipes/prompts")
    )
    recipe.write_text(text)
    completions = [
        {"model": "m", "prompt": f"def f{i}(x):\n    return x + {i}\n", "temperature": 0.9, "seed": i, "max_tokens": 6}
        for i in range(12)
    ]
    traffic = tmp_path / "traffic.jsonl"
    traffic.write_text("".join(json.dumps(c) + "\n" for c in completions))
    out, cache = tmp_path / "out", tmp_path / "cache"
    argv = ["adapt", str(recipe), "--traffic", str(traffic), "--out", str(out), "--max-steps", "1"]
    assert main([*argv, "--cache-dir", str(cache)]) in (0, 1)
    report = json.loads((out / "report.json").read_text())
    split = report["split"]["categories"]["custom"]
    assert report["teacher"]["sampled_records"] == split["train"] + split["dev"] > 0
    assert "held out: greedy" in report["teacher"]["decoding"]
    answers = []
    for entry in Store(cache).entries():
        answers += [d["output_ids"] for d in json.loads((entry.output / "decoded.json").read_text())]
    held = [r["old"]["output_ids"] for r in report["held_out"]]
    trained = [a for a in answers if a not in held]
    assert trained and all(len(a) <= 6 for a in trained)  # the request's max_tokens
    assert any(len(a) > 6 for a in held)  # the held-out part: greedy, validation.max_tokens, as the gate judges
