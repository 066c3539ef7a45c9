"""The prompt set: the recipe's (`validation.prompts`: a .txt file with one prompt per line, a .jsonl file with one
object per line, a .json array of such objects, or an inline list) or the bundled one (prompts/default.json:
Python-flavoured prompts of three kinds: code completion, summarisation-like copying, chat-like questions in
comments; a .json file, so that it ships in the wheel's package data). An object holds a "prompt" (text) or
"messages" (a chat: [{"role", "content"}, ...]), and optionally "id" and "kind".

What is sent (`Prompt.text`) follows `validation.prompt_format` (`apply_prompt_format`): the target's chat
template renders chat prompts, and text prompts as one user message, when the format is chat, or auto and the
target's tokenizer has a template; otherwise text goes as it is. `PromptFormat` records which, for the report."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from specbuild.errors import UserError
from specbuild.safe_files import read_json, read_text

if TYPE_CHECKING:
    from specbuild.recipe.schema import Recipe

BUNDLED = Path(__file__).parent / "prompts" / "default.json"
MAX_PROMPT_FILE_BYTES = 16 << 20  # prompts for a validation run, not a data set
WHAT = "prompt file (validation.prompts)"


ITEM_SHAPE = ("a JSON object with a \"prompt\" string or a \"messages\" list of {\"role\": ..., \"content\": ...} "
              "objects")


@dataclass(frozen=True)
class Prompt:
    index: int
    id: str
    kind: str
    text: str  # what is sent (for a chat prompt: its rendering, once apply_prompt_format ran)
    messages: tuple[tuple[str, str], ...] | None = None  # a chat prompt's (role, content) turns

    def conversation(self) -> list[dict[str, str]]:
        """The chat to render: the prompt's messages, or its text as one user message."""
        turns = self.messages if self.messages is not None else (("user", self.text),)
        return [{"role": role, "content": content} for role, content in turns]


def _messages(value, where: str) -> tuple[tuple[str, str], ...]:
    if not isinstance(value, list) or not value:
        raise UserError(f"{where}: \"messages\" must be a non-empty list of {{\"role\", \"content\"}} objects")
    turns = []
    for m, message in enumerate(value, 1):
        if not isinstance(message, dict) or set(message) != {"role", "content"} or \
                not all(isinstance(message[k], str) for k in ("role", "content")) or not message["role"]:
            raise UserError(f"{where}: message {m} must be an object with exactly a \"role\" and a \"content\" "
                            "string (OpenAI style, e.g. {\"role\": \"user\", \"content\": \"...\"})")
        turns.append((message["role"], message["content"]))
    return tuple(turns)


def _prompt(item, index: int, where: str) -> Prompt:
    if not isinstance(item, dict) or ("prompt" in item) == ("messages" in item):
        raise UserError(f"{where}: each item must be {ITEM_SHAPE} (one of the two)")
    ident = str(item.get("id") or f"p{index}")
    kind = str(item.get("kind") or ("chat" if "messages" in item else "custom"))
    if "messages" in item:
        return Prompt(index, ident, kind, "", _messages(item["messages"], where))
    if not isinstance(item["prompt"], str):
        raise UserError(f"{where}: \"prompt\" must be a string")
    return Prompt(index, ident, kind, item["prompt"])


def _from_items(items: list, where: str) -> list[Prompt]:
    return [_prompt(item, i, f"{where} item {i + 1}") for i, item in enumerate(items)]


def _from_json(path: Path) -> list[Prompt]:
    items = read_json(path, what=WHAT, max_bytes=MAX_PROMPT_FILE_BYTES, shape=list)
    return _from_items(items, str(path))


def _from_jsonl(path: Path) -> list[Prompt]:
    out = []
    for lineno, line in enumerate(read_text(path, what=WHAT, max_bytes=MAX_PROMPT_FILE_BYTES).splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except (ValueError, RecursionError) as e:
            raise UserError(f"{path}:{lineno}: not valid JSON ({e}) — each line must be {ITEM_SHAPE}") from None
        out.append(_prompt(item, len(out), f"{path}:{lineno}"))
    return out


def load_prompt_file(path: Path) -> list[Prompt]:
    """A .txt (one prompt per line), .jsonl or .json prompt file; every unusable file is a UserError naming it
    (missing, a folder, FIFO or device, unreadable, over MAX_PROMPT_FILE_BYTES, not UTF-8, malformed)."""
    if path.suffix == ".jsonl":
        prompts = _from_jsonl(path)
    elif path.suffix == ".json":
        prompts = _from_json(path)
    else:
        lines = [ln for ln in read_text(path, what=WHAT, max_bytes=MAX_PROMPT_FILE_BYTES).splitlines() if ln.strip()]
        prompts = [Prompt(i, f"p{i}", "custom", ln) for i, ln in enumerate(lines)]
    if not prompts:
        raise UserError(f"validation.prompts: {path} holds no prompts")
    return prompts


def load_prompts(recipe: Recipe) -> list[Prompt]:
    """The recipe's prompt set, or the bundled one."""
    value = recipe.validation.prompts
    if value is None:
        return _from_json(BUNDLED)
    if isinstance(value, list):
        if not value:
            raise UserError("validation.prompts is an empty list — give prompts or leave it out")
        return [Prompt(i, f"p{i}", "custom", item) if isinstance(item, str) else
                Prompt(i, item.id or f"p{i}", item.kind or "chat", "",
                       tuple((m.role, m.content) for m in item.messages))
                for i, item in enumerate(value)]
    return load_prompt_file(recipe.resolve(value))


@dataclass(frozen=True)
class PromptFormat:
    """How the prompts were sent: `used` chat (rendered by the target's chat template) or raw, and why."""

    requested: str  # validation.prompt_format
    used: str  # "chat" | "raw"
    why: str
    template: str | None = None  # the template's file, when used
    example: str | None = None  # the first prompt as sent

    def to_dict(self) -> dict:
        return {"requested": self.requested, "used": self.used, "why": self.why, "template": self.template,
                "example": self.example}


def apply_prompt_format(prompts: list[Prompt], requested: str, tokenizer, tokenizer_problem: str | None) \
        -> tuple[list[Prompt], PromptFormat]:
    """The prompts as they will be sent, and how (`validation.prompt_format`: auto | chat | raw). `tokenizer`: the
    target's ClientTokenizer (None: `tokenizer_problem` says why there is none). UserError for a combination that
    cannot be sent: chat without a template, chat messages sent raw, a conversation the template refuses."""
    chats = [p for p in prompts if p.messages is not None]
    template = tokenizer.chat_template if tokenizer is not None else None
    if template is None:
        missing = (f"the target's tokenizer could not be loaded ({tokenizer_problem})" if tokenizer is None else
                   f"the target's tokenizer ({tokenizer.path}) has no chat template (chat_template.jinja, or "
                   "chat_template in tokenizer_config.json)")
        if requested == "chat":
            raise UserError(f"validation.prompt_format is chat but {missing} — set model.tokenizer to a folder "
                            "with the target's chat template, or prompt_format: raw")
        if chats:
            raise UserError(f"validation.prompts: prompt {chats[0].id} is chat messages, which need the target's "
                            f"chat template, but {missing} — give the prompts as text, or set model.tokenizer to "
                            "a folder with the template")
        why = "validation.prompt_format: raw" if requested == "raw" else f"auto: {missing}"
        return prompts, PromptFormat(requested, "raw", why, example=prompts[0].text if prompts else None)
    if requested == "raw":
        if chats:
            raise UserError(f"validation.prompts: prompt {chats[0].id} is chat messages but "
                            "validation.prompt_format is raw — give it as text, or use prompt_format auto or chat")
        return prompts, PromptFormat(requested, "raw", "validation.prompt_format: raw (the target's tokenizer has "
                                     f"a chat template, {template}, not applied)",
                                     example=prompts[0].text if prompts else None)
    rendered = []
    for p in prompts:
        try:
            rendered.append(replace(p, text=tokenizer.render_chat(p.conversation())))
        except ValueError as e:
            raise UserError(f"validation.prompts: prompt {p.id}: {e} — fix the prompt's messages (roles and "
                            "order), or set prompt_format: raw") from None
    why = ("validation.prompt_format: chat" if requested == "chat" else
           "auto: the target's tokenizer has a chat template") + "; text prompts are sent as one user message"
    return rendered, PromptFormat(requested, "chat", why, template=f"{tokenizer.path}/{template}",
                                  example=rendered[0].text if rendered else None)
