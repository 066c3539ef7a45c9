"""`check` knows every fact about the prompt set that can be known before serving (issue #39 items 2 and 3): it runs
the suite's own preparation of the set (recipe.prompts.prepare_prompts) with the target's tokenizer, so it refuses
what the suite would refuse — chat messages while the target has no chat template, prompt_format chat without one, a
conversation the template refuses, a set none of whose prompts fits — located at the recipe field and naming the
record's file:line, and notes what the suite would leave out (prompts longer than build.max_input_len). A record's
metadata (keys no format defines) is read past and named once. The tiny zoo's target (no chat template)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from specbuild.cli import main

ROOT = Path(__file__).resolve().parents[2]
TARGET = ROOT / "checkpoints" / "tiny" / "target"
LONG = "x = 1; " * 200  # about 800 tokens of the tiny tokenizer


@pytest.fixture(autouse=True)
def _zoo():
    if not (TARGET / "tokenizer.json").is_file():
        pytest.skip("checkpoints/tiny not built")


def _check(tmp_path, capsys, records: list[dict] | None, *, tokenizer: Path | None = None, **validation) -> tuple:
    """`specbuild check` of a recipe on the tiny target whose prompts are `records` (a .jsonl file): (exit code,
    stdout, stderr) with whitespace folded."""
    if records is not None:
        (tmp_path / "traffic.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
        validation = {"prompts": "traffic.jsonl", **validation}
    model = {"checkpoint": str(TARGET), "dtype": "float32", **({"tokenizer": str(tokenizer)} if tokenizer else {})}
    recipe = {
        "name": "t",
        "runtime": "reference",
        "model": model,
        "build": {"max_input_len": 64, "max_seq_len": 128},
        "validation": {"max_tokens": 16, **validation},
    }
    (tmp_path / "r.yaml").write_text(json.dumps(recipe, indent=1))  # JSON is YAML
    code = main(["check", str(tmp_path / "r.yaml")])
    out, err = capsys.readouterr()
    return code, " ".join(out.split()), " ".join(err.split())


def test_chat_records_without_a_chat_template_are_refused_by_check(tmp_path, capsys):
    records = [{"prompt": "def add(a, b):"}, {"messages": [{"role": "user", "content": "hi"}], "id": "hello"}]
    code, out, err = _check(tmp_path, capsys, records)
    assert code == 2, out
    assert (
        f"validation.prompts: prompt hello ({tmp_path / 'traffic.jsonl'}:2) is chat messages, which need the "
        f"target's chat template, but the target's tokenizer ({TARGET}) has no chat template"
    ) in err, err
    assert "— give the prompts as text, or set model.tokenizer to a folder with the template" in err


def test_prompt_format_chat_without_a_template_is_refused_by_check(tmp_path, capsys):
    code, out, err = _check(tmp_path, capsys, [{"prompt": "def add(a, b):"}], prompt_format="chat")
    assert code == 2, out
    assert "validation.prompt_format: is chat but the target's tokenizer" in err, err


def test_a_conversation_the_template_refuses_is_refused_by_check(tmp_path, capsys):
    pytest.importorskip("transformers")
    folder = tmp_path / "tok"
    folder.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(TARGET / name, folder / name)
    (folder / "chat_template.jinja").write_text(
        "{%- if messages[0]['role'] != 'user' %}{{ raise_exception('Conversation roles must start with user') }}"
        "{%- endif %}[INST] {{ messages[0]['content'] }} [/INST]"
    )
    fine = {"messages": [{"role": "user", "content": "hi"}]}
    code, out, err = _check(tmp_path, capsys, [fine], tokenizer=folder)
    assert code == 0, err
    code, out, err = _check(
        tmp_path, capsys, [fine, {"messages": [{"role": "system", "content": "x"}]}], tokenizer=folder
    )
    assert code == 2, out
    assert f"validation.prompts: prompt p1 ({tmp_path / 'traffic.jsonl'}:2): the chat template of" in err, err
    assert "Conversation roles must start with user — fix the prompt's messages" in err


def test_prompts_longer_than_max_input_len_are_noted_and_a_set_none_fits_is_refused(tmp_path, capsys):
    code, out, err = _check(tmp_path, capsys, [{"prompt": "def add(a, b):"}, {"prompt": LONG, "id": "big"}])
    assert code == 0, err
    assert (
        f"note: validation.prompts: 1 of 2 prompts do not fit the deployment and will be left out of validation (the "
        f"report lists them): {tmp_path / 'traffic.jsonl'}:2 (big: "
    ) in out, out
    assert "> build.max_input_len 64) — shorten them, or raise build.max_input_len / build.max_seq_len" in out
    code, out, err = _check(tmp_path, capsys, [{"prompt": LONG, "id": "big"}])
    assert code == 2, out
    assert f"validation.prompts: no prompt fits the deployment (big at {tmp_path / 'traffic.jsonl'}:1: " in err, err


def test_an_empty_or_unreadable_prompt_set_is_refused_by_check(tmp_path, capsys):
    """(Refused before issue #39 too: kept here with the rest of what check knows of a prompt set.)"""
    code, out, err = _check(tmp_path, capsys, [])
    assert code == 2 and f"{tmp_path / 'traffic.jsonl'} holds no prompts" in err, (out, err)
    code, out, err = _check(tmp_path, capsys, None, prompts=[])
    assert code == 2 and err.count("validation.prompts: is an empty list") == 1, (out, err)
    code, out, err = _check(tmp_path, capsys, None, prompts="missing.jsonl")
    assert code == 2 and "missing.jsonl" in err and "validation.prompts:" in err, (out, err)


def test_a_records_metadata_is_ignored_and_named_once(tmp_path, capsys):
    """Item 3: a traffic file's records carry metadata (a log's source, a timestamp, a user id): the fields the
    format defines are read, the rest ignored, and `check` names the ignored keys in one note."""
    records = [
        {"prompt": "def add(a, b):", "source": "gateway-7", "timestamp": "2026-12-01T10:00:00Z", "user": 42},
        {"prompt": "class Stack:", "category": "coding", "source": "gateway-7"},
        {"messages": [{"role": "user", "content": "hi"}], "source": "gateway-7", "user": 7},
    ]
    code, out, err = _check(tmp_path, capsys, records[:2])
    assert code == 0, err
    note = (
        f"note: {tmp_path / 'traffic.jsonl'}: ignored the keys no prompt format defines: source (2 of 2 records), "
        "timestamp (1 of 2 records), user (1 of 2 records)"
    )
    assert out.count(note) == 1, out
    from specbuild.recipe.prompts import ignored_note, load_prompt_file

    prompts = load_prompt_file(tmp_path / "traffic.jsonl")
    assert [(p.id, p.category, p.text, p.ignored) for p in prompts] == [
        ("p0", "custom", "def add(a, b):", ("source", "timestamp", "user")),
        ("p1", "coding", "class Stack:", ("source",)),
    ]
    (tmp_path / "chat.jsonl").write_text(json.dumps(records[2]) + "\n")
    chat = load_prompt_file(tmp_path / "chat.jsonl")
    assert chat[0].messages == (("user", "hi"),)
    assert ignored_note(chat, "chat.jsonl") == (
        "chat.jsonl: ignored the keys no prompt format defines: source (1 of 1 records), user (1 of 1 records)"
    )
