"""The validation client's tokenizer and the prompts it sends: SentencePiece-only tokenizers (vicuna's layout) load,
a tokenizer that cannot be loaded is reported with its reason, and validation.prompt_format renders prompts through
the target's chat template (a stand-in of Llama-3.1-8B-Instruct's tokenizer carrying its published template) or
sends them raw (the tiny zoo's tokenizer has no template). No server."""

from __future__ import annotations

import importlib.util
import io
import json
from pathlib import Path

import pytest
from validate_toy.tokenizer import LLAMA3_SPECIALS, write_llama31_chat_tokenizer, write_toy_tokenizer

from specbuild.errors import UserError
from specbuild.recipe.schema import Recipe
from specbuild.checkpoints import client_tokenizer as tokenizer_module
from specbuild.recipe.prompts import Prompt, apply_prompt_format, load_prompt_file, load_prompts
from specbuild.checkpoints.client_tokenizer import TokenizerUnavailable, load_tokenizer

ROOT = Path(__file__).resolve().parents[2]
ZOO_TOKENIZER = ROOT / "checkpoints" / "tiny" / "target"
TEXT = "def add(a, b):\n    return a + b"

# One user turn in Llama-3.1's prompt format (meta-llama/llama-models llama_models/llama3_1/prompt_format.md: each
# turn <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|>, the assistant's header opened last); the
# published template always writes the system turn, with its knowledge-cutoff lines and date_string's default.
# Without the leading <|begin_of_text|>, which the server's tokenizer adds.
LLAMA31_USER_TURN = (
    "<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
    "Today Date: 26 Jul 2024\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n"
    "What is 2+2?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
)


@pytest.fixture(scope="module")
def llama31(tmp_path_factory):
    return load_tokenizer(write_llama31_chat_tokenizer(tmp_path_factory.mktemp("llama31")))


@pytest.fixture(scope="module")
def vicuna_tokenizer(tmp_path_factory) -> Path:
    """A folder laid out as lmsys/vicuna-7b-v1.3's tokenizer (real-checkpoints.md): a SentencePiece tokenizer.model
    only (a small BPE one with byte fallback, <unk> <s> </s> at 0 1 2, trained here) and a LlamaTokenizer
    tokenizer_config.json, no chat template."""
    sentencepiece = pytest.importorskip("sentencepiece")
    lines = [
        "def add(a, b):\n    return a + b",
        "The quick brown fox jumps over the lazy dog.",
        "import os\nprint(os.getcwd())",
        "for i in range(10):\n    total += i",
    ] * 20
    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(lines),
        model_writer=model,
        vocab_size=400,
        model_type="bpe",
        byte_fallback=True,
        unk_id=0,
        bos_id=1,
        eos_id=2,
        pad_id=-1,
        character_coverage=1.0,
        normalization_rule_name="identity",
        remove_extra_whitespaces=False,
        split_digits=True,
        minloglevel=2,
    )
    folder = tmp_path_factory.mktemp("vicuna")
    (folder / "tokenizer.model").write_bytes(model.getvalue())
    (folder / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "add_bos_token": True,
                "add_eos_token": False,
                "bos_token": "<s>",
                "eos_token": "</s>",
                "unk_token": "<unk>",
                "pad_token": None,
                "clean_up_tokenization_spaces": False,
                "legacy": False,
                "model_max_length": 2048,
                "tokenizer_class": "LlamaTokenizer",
            }
        )
    )
    return folder


# --- tokenizers -------------------------------------------------------------------------------------------------


def test_a_sentencepiece_only_tokenizer_loads(vicuna_tokenizer):
    import sentencepiece

    tok = load_tokenizer(vicuna_tokenizer)
    assert "SentencePiece" in tok.reader and tok.chat_template is None
    own = sentencepiece.SentencePieceProcessor(model_file=str(vicuna_tokenizer / "tokenizer.model"))
    for text in (TEXT, "The lazy dog.", "print(os.getcwd())"):
        assert tok.encode(text) == own.encode(text)  # no <s>: stop words are encoded without special tokens
        assert tok.decode(tok.encode(text)) == text


def test_a_sentencepiece_tokenizer_without_the_package_says_so(vicuna_tokenizer, monkeypatch):
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "sentencepiece" else find_spec(name, *a)
    )

    def no_sentencepiece(folder):
        raise ValueError("`tiktoken` is required to read a `tiktoken` file")  # transformers 5 without sentencepiece

    monkeypatch.setattr(tokenizer_module, "_auto_tokenizer", no_sentencepiece)
    with pytest.raises(
        TokenizerUnavailable,
        match=r"tokenizer\.model is a SentencePiece model, which needs the "
        r"sentencepiece package — pip install 'specbuild\[reference\]'",
    ):
        load_tokenizer(vicuna_tokenizer)


def test_what_cannot_be_loaded_is_said(tmp_path):
    with pytest.raises(TokenizerUnavailable, match="is not a folder on this machine"):
        load_tokenizer(tmp_path / "missing")
    with pytest.raises(TokenizerUnavailable, match=r"no tokenizer in .* \(no tokenizer.json, tokenizer.model"):
        load_tokenizer(tmp_path)
    (tmp_path / "tokenizer.json").write_text("{not json")
    with pytest.raises(TokenizerUnavailable, match=r"tokenizer.json: Exception: .*; transformers: "):
        load_tokenizer(tmp_path)


def test_the_functional_check_says_why_stop_words_were_not_tried():
    from types import SimpleNamespace

    from specbuild.validate.checks.functional import _stop_words

    ctx = SimpleNamespace(
        tokenizer=None,
        tokenizer_problem="/models/vicuna: tokenizer.model is a SentencePiece "
        "model, which needs the sentencepiece package",
    )
    problems, details = _stop_words(ctx, [])
    assert problems == [] and details["skipped"] == f"no client tokenizer: {ctx.tokenizer_problem}"


# --- chat templates -----------------------------------------------------------------------------------------------


def test_llama31_template_renders_a_user_turn_with_one_bos(llama31):
    assert llama31.chat_template == "tokenizer_config.json (chat_template)"
    text = llama31.render_chat([{"role": "user", "content": "What is 2+2?"}])
    assert text == LLAMA31_USER_TURN
    # the server encodes the prompt with its special tokens: exactly one <|begin_of_text|>, then the header
    ids = llama31._transformers.encode(text)
    bos, header = (llama31._transformers.convert_tokens_to_ids(t) for t in ("<|begin_of_text|>", "<|start_header_id|>"))
    assert ids[:2] == [bos, header] and ids.count(bos) == 1
    assert set(LLAMA3_SPECIALS) <= set(llama31._transformers.get_vocab())


def test_auto_applies_the_template_to_text_and_chat_prompts(llama31):
    prompts = [
        Prompt(0, "p0", "custom", "What is 2+2?"),
        Prompt(
            1,
            "c1",
            "chat",
            "",
            (
                ("system", "Answer in one word."),
                ("user", "Capital of France?"),
                ("assistant", "Paris."),
                ("user", "Of Italy?"),
            ),
        ),
    ]
    sent, how = apply_prompt_format(prompts, "auto", llama31, None)
    assert (
        how.used == "chat"
        and how.requested == "auto"
        and how.template.endswith("tokenizer_config.json (chat_template)")
    )
    assert sent[0].text == LLAMA31_USER_TURN and how.example == LLAMA31_USER_TURN
    assert sent[1].text == (
        "<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
        "Today Date: 26 Jul 2024\n\nAnswer in one word.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nCapital of France?<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\nParis.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nOf Italy?<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
    )
    assert [(p.id, p.category, p.messages) for p in sent] == [(p.id, p.category, p.messages) for p in prompts]
    raw, how = apply_prompt_format(prompts[:1], "raw", llama31, None)
    assert raw[0].text == "What is 2+2?" and how.used == "raw" and "not applied" in how.why
    with pytest.raises(UserError, match="prompt c1 is chat messages but validation.prompt_format is raw"):
        apply_prompt_format(prompts, "raw", llama31, None)


def test_the_zoo_tokenizer_has_no_template_so_prompts_go_raw():
    if not (ZOO_TOKENIZER / "tokenizer.json").is_file():
        pytest.skip("checkpoints/tiny not built")
    tok = load_tokenizer(ZOO_TOKENIZER)
    assert tok.chat_template is None
    prompts = [Prompt(0, "p0", "code", TEXT)]
    sent, how = apply_prompt_format(prompts, "auto", tok, None)
    assert sent == prompts and how.used == "raw" and "has no chat template" in how.why and how.template is None
    with pytest.raises(
        UserError,
        match=r"prompt_format: is chat but the target's tokenizer \(.*tiny/target\) has no "
        r"chat template .* — set model.tokenizer",
    ):
        apply_prompt_format(prompts, "chat", tok, None)
    chat = [Prompt(0, "c0", "chat", "", (("user", "hi"),))]
    with pytest.raises(UserError, match="prompt c0 is chat messages, which need the target's chat template"):
        apply_prompt_format(chat, "auto", tok, None)


def test_without_a_tokenizer_auto_is_raw_and_says_why():
    prompts = [Prompt(0, "p0", "code", TEXT)]
    sent, how = apply_prompt_format(prompts, "auto", None, "/models/x is not a folder on this machine")
    assert sent == prompts and how.used == "raw" and "/models/x is not a folder on this machine" in how.why


def test_a_conversation_the_template_refuses_is_a_user_error(tmp_path):
    folder = write_toy_tokenizer(tmp_path / "tok")
    # chat_template.jinja is read before tokenizer_config.json's template, as transformers does
    (folder / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{{ messages[0]['content'] }}"}))
    (folder / "chat_template.jinja").write_text(
        "{%- if messages[0]['role'] != 'user' %}{{ raise_exception('Conversation roles must start with user') }}"
        "{%- endif %}[INST] {{ messages[0]['content'] }} [/INST]"
    )
    tok = load_tokenizer(folder)
    assert tok.chat_template == "chat_template.jinja"
    sent, _ = apply_prompt_format([Prompt(0, "p0", "x", "hi")], "chat", tok, None)
    assert sent[0].text == "[INST] hi [/INST]"
    with pytest.raises(
        UserError,
        match=r"prompt s0: the chat template of .* refused it: .*Conversation roles must "
        r"start with user — fix the prompt's messages",
    ):
        apply_prompt_format([Prompt(0, "s0", "chat", "", (("system", "x"),))], "chat", tok, None)


# --- prompt sets with chat messages -------------------------------------------------------------------------------


def test_prompt_files_and_recipes_hold_chat_messages(tmp_path):
    turns = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    (tmp_path / "chat.jsonl").write_text(
        json.dumps({"messages": turns, "id": "greet"})
        + "\n"
        + json.dumps({"prompt": "def f():", "kind": "code"})
        + "\n"
    )
    prompts = load_prompt_file(tmp_path / "chat.jsonl")
    assert [(p.id, p.category, p.messages) for p in prompts] == [
        ("greet", "chat", (("system", "Be brief."), ("user", "Hi"))),
        ("p1", "code", None),
    ]
    assert prompts[0].conversation() == turns and prompts[1].conversation() == [{"role": "user", "content": "def f():"}]
    for bad, match in (
        (
            {"messages": []},
            r"bad.jsonl:1: a chat record, but messages: List should have at least 1 "
            r"item .* — write it as \{\"messages\": \[",
        ),
        (
            {"messages": [{"role": "user"}]},
            r"bad.jsonl:1: a chat record, but messages.0.content: Field "
            r"required — write it as",
        ),
        (
            {"messages": turns, "prompt": "x"},
            r"bad.jsonl:1: the record has both \"prompt\" and "
            r"\"messages\" — give one of: text",
        ),
    ):
        (tmp_path / "bad.jsonl").write_text(json.dumps(bad) + "\n")
        with pytest.raises(UserError, match=match):
            load_prompt_file(tmp_path / "bad.jsonl")
    recipe = Recipe.model_validate(
        {
            "name": "x",
            "model": {"checkpoint": "m"},
            "validation": {"prompt_format": "chat", "prompts": ["plain", {"messages": turns, "id": "greet"}]},
        }
    )
    assert recipe.validation.prompt_format == "chat"
    assert [(p.id, p.category, p.text, p.messages) for p in load_prompts(recipe)] == [
        ("p0", "custom", "plain", None),
        ("greet", "chat", "", (("system", "Be brief."), ("user", "Hi"))),
    ]
    assert Recipe.model_validate({"name": "x", "model": {"checkpoint": "m"}}).validation.prompt_format == "auto"


def test_check_locates_a_bad_chat_prompt_in_the_recipe(tmp_path):
    import subprocess
    import sys

    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        "name: r\nmodel:\n  checkpoint: m\nvalidation:\n  prompt_format: chatty\n  prompts:\n"
        "    - messages:\n        - {role: user, text: hi}\n"
    )
    out = subprocess.run(
        [sys.executable, "-m", "specbuild.cli", "check", str(recipe)],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(ROOT / "pipeline"), "PATH": "/usr/bin:/bin"},
    )
    assert out.returncode == 2, out.stdout + out.stderr
    text = out.stdout + out.stderr
    assert (
        "r.yaml:5:18: validation.prompt_format: 'chatty' is not allowed — did you mean 'chat'? (one of auto, "
        "chat, raw)" in text
    ), text
    assert "r.yaml:8:11: validation.prompts[0].messages[0].content: required key 'content' is missing" in text, text
    assert "r.yaml:8:24: validation.prompts[0].messages[0].text: unknown key 'text' — allowed: content, role" in text
    assert text.count("r.yaml:") == 3, text  # one error per problem, not one per member of the prompts' union
