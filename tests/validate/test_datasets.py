"""Prompt datasets (validation.prompts): every record format, located errors, the bundled multi-category set, and
what the suite leaves out of a set (prompts over the deployment's limits, the bundled chats without a template)."""

from __future__ import annotations

import json

import pytest

from specbuild.errors import UserError
from specbuild.recipe.prompts import BUNDLED, Prompt, bundled_chats_unsendable, fit_to_limits, load_prompt_file

CHAT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]


def write_jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_each_record_format_is_recognised_per_record(tmp_path):
    records = [
        {"prompt": "def f():", "category": "coding"},
        {"prompt": "old style", "kind": "code"},
        {"messages": CHAT + [{"role": "assistant", "content": "Hello!"}], "id": "c1", "category": "chat"},
        {
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "two "}, {"type": "text", "text": "parts"}]}
            ]
        },
        {
            "conversations": [
                {"from": "human", "value": "Q1"},
                {"from": "gpt", "value": "A1"},
                {"from": "human", "value": "Q2"},
                {"from": "gpt", "value": "A2"},
            ],
            "id": "sg",
            "category": "multi-turn chat",
            "model": "gpt-4",
        },
        {"model": "llama", "messages": CHAT, "temperature": 0.7, "max_tokens": 99, "metadata": {"category": "support"}},
        {"model": "llama", "prompt": "completion text", "category": "legacy"},
        {
            "custom_id": "req-7",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {"model": "llama", "messages": [{"role": "user", "content": "batch"}]},
        },
    ]
    prompts = load_prompt_file(write_jsonl(tmp_path / "mixed.jsonl", records))
    got = [(p.id, p.category, p.source, p.text, p.messages) for p in prompts]
    assert got == [
        ("p0", "coding", "text", "def f():", None),
        ("p1", "code", "text", "old style", None),
        # the trailing assistant turn is the reply asked for: dropped
        ("c1", "chat", "chat", "", (("system", "Be brief."), ("user", "Hi"))),
        ("p3", "chat", "chat", "", (("user", "two parts"),)),
        ("sg", "multi-turn chat", "sharegpt", "", (("user", "Q1"), ("assistant", "A1"), ("user", "Q2"))),
        ("p5", "support", "request", "", (("system", "Be brief."), ("user", "Hi"))),
        ("p6", "legacy", "request", "completion text", None),
        ("req-7", "chat", "request", "", (("user", "batch"),)),
    ]


def test_sharegpt_json_array_is_read_with_item_locations(tmp_path):
    data = [
        {"id": "a", "conversations": [{"from": "human", "value": "hello"}]},
        {"id": "b", "conversations": [{"from": "robot", "value": "x"}]},
    ]
    (tmp_path / "share.json").write_text(json.dumps(data[:1]))
    assert [(p.id, p.messages) for p in load_prompt_file(tmp_path / "share.json")] == [("a", (("user", "hello"),))]
    (tmp_path / "bad.json").write_text(json.dumps(data))
    with pytest.raises(
        UserError,
        match=r"bad.json: item 2: a ShareGPT record, but conversations.0.from: Input should "
        r"be 'human', .* — write it as \{\"conversations\"",
    ):
        load_prompt_file(tmp_path / "bad.json")


@pytest.mark.parametrize(
    "record, message",
    [
        ([1, 2], r"bad.jsonl:2: a record must be a JSON object, not list — give one of: text"),
        ({"text": "x"}, r"bad.jsonl:2: the record has neither \"prompt\" and \"messages\" — give one of"),
        (
            {"prompt": 5, "source": "gateway"},  # a field the format defines must be well formed; metadata is not
            r"bad.jsonl:2: a text record, but prompt: Input should be a valid string — write it as \{\"prompt\"",
        ),
        (
            {"messages": [{"role": "assistant", "content": "only me"}]},
            r"bad.jsonl:2: the conversation has only assistant turns — give at least one turn for the model to answer",
        ),
        (
            {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
            r"bad.jsonl:2: a chat record, but messages.0.content: Value error, part 1 is image_url: only text parts can "
            r"be sent — write it as",
        ),
        (
            {"model": "m", "messages": "hi"},
            r"bad.jsonl:2: a chat-completion request record, but messages: Input should be "
            r"a valid list — write it as an OpenAI chat-completion body",
        ),
        ({"custom_id": "x", "body": {"model": "m"}}, r"bad.jsonl:2: the record has neither"),
    ],
)
def test_a_bad_record_is_located_and_says_what_to_do(tmp_path, record, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"prompt": "fine"}) + "\n" + json.dumps(record) + "\n")
    with pytest.raises(UserError, match=message):
        load_prompt_file(path)


def test_broken_json_and_duplicate_ids_are_located(tmp_path):
    (tmp_path / "broken.jsonl").write_text('{"prompt": "a"}\n\n{"prompt": \n')
    with pytest.raises(UserError, match=r"broken.jsonl:3: not valid JSON .* — each line must be one JSON record"):
        load_prompt_file(tmp_path / "broken.jsonl")
    write_jsonl(tmp_path / "dup.jsonl", [{"prompt": "a", "id": "x"}, {"prompt": "b", "id": "x"}])
    with pytest.raises(UserError, match=r"dup.jsonl: prompts 1 and 2 share the id 'x' — give each record its own id"):
        load_prompt_file(tmp_path / "dup.jsonl")


def test_a_bad_dataset_is_refused_by_check_with_exit_2(tmp_path, capsys):
    from specbuild.cli import main

    write_jsonl(tmp_path / "traffic.jsonl", [{"prompt": "ok"}, {"conversations": []}])
    (tmp_path / "r.yaml").write_text("name: x\nmodel: {checkpoint: m}\nvalidation: {prompts: traffic.jsonl}\n")
    assert main(["check", str(tmp_path / "r.yaml")]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "traffic.jsonl:2: a ShareGPT record, but conversations: List should have at least 1 item" in err, err
    assert "Traceback" not in err


def test_check_locates_a_category_gate_the_dataset_does_not_hold(tmp_path, capsys):
    from specbuild.cli import main

    write_jsonl(
        tmp_path / "traffic.jsonl", [{"prompt": "a", "category": "coding"}, {"prompt": "b", "category": "writing"}]
    )
    (tmp_path / "r.yaml").write_text(
        "name: x\nmodel: {checkpoint: m}\nvalidation:\n  prompts: traffic.jsonl\n"
        "  min_acceptance_length:\n    default: 1.5\n    coding: 2.0\n"
        "    codng: 2.5\n"
    )
    assert main(["check", str(tmp_path / "r.yaml")]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert (
        f"{tmp_path / 'r.yaml'}:8:12: validation.min_acceptance_length.codng: gates category 'codng', which "
        "traffic.jsonl does not hold (its categories: coding, writing), so it would never be judged — name one "
        "of those, or add prompts of 'codng'"
    ) in err, err
    assert "'coding'" not in err and "'default'" not in err
    # the bundled set: its own categories are named
    (tmp_path / "r.yaml").write_text(
        "name: x\nmodel: {checkpoint: m}\nvalidation: {min_acceptance_length: {coding: 2.0, chat: 2.0}}\n"
    )
    assert main(["check", str(tmp_path / "r.yaml")]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert (
        "validation.min_acceptance_length.chat: gates category 'chat', which the bundled prompt set does not "
        "hold (its categories: coding, extraction, long-context, math, multi-turn chat, summarising, writing)" in err
    ), err
    assert "'coding'" not in err


def test_bundled_set_loads_and_covers_every_category():
    prompts = load_prompt_file(BUNDLED)
    by = {}
    for p in prompts:
        by.setdefault(p.category, []).append(p)
    assert sorted(by) == sorted(
        ["writing", "coding", "math", "extraction", "summarising", "multi-turn chat", "long-context"]
    )
    assert all(p.messages is not None for p in by["multi-turn chat"])
    assert all(p.messages is None for c, ps in by.items() if c != "multi-turn chat" for p in ps)


class ByteTokenizer:
    chat_template = None

    def encode(self, text):
        return list(text.encode())


def test_prompts_over_the_limits_are_left_out_and_said_why():
    prompts = [
        Prompt(0, "short", "a", "x" * 10),
        Prompt(1, "long", "b", "x" * 80),
        Prompt(2, "tight", "c", "x" * 58),
        Prompt(3, "fits", "c", "x" * 57),
    ]
    kept, out, lengths = fit_to_limits(prompts, ByteTokenizer(), max_input_len=80, max_seq_len=90, max_tokens=32)
    assert [p.id for p in kept] == ["short", "fits"]  # 57 + 1 + 32 = 90
    assert [o.to_dict() for o in out] == [
        {
            "prompt": "long",
            "category": "b",
            "why": "80 tokens (+1 the server's tokenizer may add) > build.max_input_len 80",
        },
        {
            "prompt": "tight",
            "category": "c",
            "why": "58 tokens (+1 the server's tokenizer may add) + validation.max_tokens 32 > build.max_seq_len 90",
        },
    ]
    assert lengths == {"short": 10, "long": 80, "tight": 58, "fits": 57}
    assert fit_to_limits(prompts, None, 1, 1, 1) == (prompts, [], {})  # no tokenizer: nothing can be counted
    with pytest.raises(UserError, match="no prompt fits the deployment .* raise build.max_input_len"):
        fit_to_limits(prompts[1:2], ByteTokenizer(), 80, 90, 32)


def test_bundled_chats_need_a_template():
    prompts = load_prompt_file(BUNDLED)
    kept, out = bundled_chats_unsendable(prompts, ByteTokenizer())
    assert {o.category for o in out} == {"multi-turn chat"} and all(p.messages is None for p in kept)
    assert len(kept) + len(out) == len(prompts)
    templated = ByteTokenizer()
    templated.chat_template = "chat_template.jinja"
    assert bundled_chats_unsendable(prompts, templated) == (prompts, [])
    kept, out = bundled_chats_unsendable(prompts, templated, "raw")  # raw sends text only: the chats are left out
    assert [o.why for o in out] == ["chat messages, and validation.prompt_format is raw"] * len(out) and out
