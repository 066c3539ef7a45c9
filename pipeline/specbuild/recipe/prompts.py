"""The prompt set: the recipe's (`validation.prompts`: a dataset file or an inline list) or the bundled one
(prompts/default.jsonl: a small set made by this project, two or three prompts in each of seven categories:
writing, coding, math, extraction, summarising, multi-turn chat, long-context; in the package data, so that it
ships in the wheel).

A dataset file is .txt (one text prompt per line), .jsonl (one record per line) or .json (an array of records).
Each record is one of the formats of `prompt_records` (text, OpenAI chat messages, ShareGPT, an OpenAI request
body as request logs hold them), decided per record, with an optional `id` and `category`. A record that is none
of them is a UserError located at file:line (file: item N in a .json array) that says what is wrong and what to do.

What is sent (`Prompt.text`) follows `validation.prompt_format` (`apply_prompt_format`): the target's chat
template renders chat prompts, and text prompts as one user message, when the format is chat, or auto and the
target's tokenizer has a template; otherwise text goes as it is. `PromptFormat` records which, for the report."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from specbuild.errors import UserError
from specbuild.recipe.prompt_records import FORMATS, RecordProblem, RequestSampling, parse_record
from specbuild.files.safe_files import read_json, read_text

if TYPE_CHECKING:
    from specbuild.recipe.schema import Recipe

BUNDLED = Path(__file__).parent / "prompts" / "default.jsonl"
BUNDLED_SHOWN = "specbuild/recipe/prompts/default.jsonl"  # where its records are said to be (in the package)
MAX_PROMPT_FILE_BYTES = 16 << 20  # prompts for a validation run, not a training set
WHAT = "prompt file (validation.prompts)"
TEXT_CATEGORY, CHAT_CATEGORY = "custom", "chat"  # a record's category when it names none


@dataclass(frozen=True)
class Prompt:
    index: int
    id: str
    category: str
    text: str  # what is sent (for a chat prompt: its rendering, once apply_prompt_format ran)
    messages: tuple[tuple[str, str], ...] | None = None  # a chat prompt's (role, content) turns
    source: str = "text"  # the record's format: text, chat, sharegpt, request
    where: str = ""  # where the record is: "FILE:LINE", "FILE: item N" (.json), "validation.prompts[N]" (inline)
    ignored: tuple[str, ...] = ()  # the record's keys its format does not define (metadata), not read
    sampling: RequestSampling | None = None  # a request record's sampling settings (read by adapt only)

    def conversation(self) -> list[dict[str, str]]:
        """The chat to render: the prompt's messages, or its text as one user message."""
        turns = self.messages if self.messages is not None else (("user", self.text),)
        return [{"role": role, "content": content} for role, content in turns]


def _prompt(item, index: int, where: str) -> Prompt:
    try:
        fmt, fields = parse_record(item)
    except RecordProblem as e:
        raise UserError(f"{where}: {e}") from None
    ident = str(fields["id"]) if fields["id"] not in (None, "") else f"p{index}"
    turns = fields.get("turns")
    category = fields["category"] or (CHAT_CATEGORY if turns is not None else TEXT_CATEGORY)
    text = "" if turns is not None else fields["text"]
    return Prompt(index, ident, category, text, turns, fmt, where, fields["ignored"], fields.get("sampling"))


def ignored_note(prompts: list[Prompt], source: str) -> str | None:
    """One sentence naming the record keys no format defines (a traffic file's metadata), which were not read, and
    in how many records of `source` (the file); None when there were none."""
    counts: dict[str, int] = {}
    for p in prompts:
        for key in p.ignored:
            counts[key] = counts.get(key, 0) + 1
    if not counts:
        return None
    keys = ", ".join(f"{k} ({n} of {len(prompts)} records)" for k, n in sorted(counts.items()))
    return f"{source}: ignored the keys no prompt format defines: {keys}"


def _unique_ids(prompts: list[Prompt], where: str) -> list[Prompt]:
    seen: dict[str, int] = {}
    for p in prompts:
        if p.id in seen:
            raise UserError(
                f"{where}: prompts {seen[p.id] + 1} and {p.index + 1} share the id {p.id!r} — give "
                "each record its own id (reports and comparisons find prompts by id)"
            )
        seen[p.id] = p.index
    return prompts


def _from_json(path: Path, shown: str) -> list[Prompt]:
    items = read_json(path, what=WHAT, max_bytes=MAX_PROMPT_FILE_BYTES, shape=list)
    return [_prompt(item, i, f"{shown}: item {i + 1}") for i, item in enumerate(items)]


def _from_jsonl(path: Path, shown: str) -> list[Prompt]:
    out = []
    for lineno, line in enumerate(read_text(path, what=WHAT, max_bytes=MAX_PROMPT_FILE_BYTES).splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except (ValueError, RecursionError) as e:
            raise UserError(
                f"{path}:{lineno}: not valid JSON ({e}) — each line must be one JSON record: {FORMATS}"
            ) from None
        out.append(_prompt(item, len(out), f"{shown}:{lineno}"))
    return out


def load_prompt_file(path: Path, shown: str | None = None) -> list[Prompt]:
    """A .txt (one prompt per line), .jsonl or .json prompt file; every unusable file is a UserError naming it
    (missing, a folder, FIFO or device, unreadable, over MAX_PROMPT_FILE_BYTES, not UTF-8, malformed)."""
    if path.suffix == ".jsonl":
        prompts = _from_jsonl(path, shown or str(path))
    elif path.suffix == ".json":
        prompts = _from_json(path, shown or str(path))
    else:
        lines = [
            (n, ln)
            for n, ln in enumerate(read_text(path, what=WHAT, max_bytes=MAX_PROMPT_FILE_BYTES).splitlines(), 1)
            if ln.strip()
        ]
        prompts = [
            Prompt(i, f"p{i}", TEXT_CATEGORY, ln, where=f"{shown or path}:{n}") for i, (n, ln) in enumerate(lines)
        ]
    if not prompts:
        raise UserError(f"validation.prompts: {path} holds no prompts")
    return _unique_ids(prompts, str(path))


def prompt_source(recipe: Recipe) -> str:
    """Where the recipe's prompts come from, as reports name it: bundled, inline, or the file."""
    value = recipe.validation.prompts
    return "bundled" if value is None else "inline" if isinstance(value, list) else str(recipe.resolve(value))


def load_prompts(recipe: Recipe) -> list[Prompt]:
    """The recipe's prompt set, or the bundled one."""
    value = recipe.validation.prompts
    if value is None:
        return load_prompt_file(BUNDLED, BUNDLED_SHOWN)
    if isinstance(value, list):
        if not value:
            raise PromptSetError(PROMPTS_FIELD, "is an empty list — give prompts, or leave it out for the bundled set")
        return _unique_ids(
            [
                Prompt(i, f"p{i}", TEXT_CATEGORY, item, where=f"validation.prompts[{i}]")
                if isinstance(item, str)
                else Prompt(
                    i,
                    item.id or f"p{i}",
                    item.category or item.kind or CHAT_CATEGORY,
                    "",
                    tuple((m.role, m.content) for m in item.messages),
                    "chat",
                    f"validation.prompts[{i}]",
                )
                for i, item in enumerate(value)
            ],
            "validation.prompts",
        )
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
        return {
            "requested": self.requested,
            "used": self.used,
            "why": self.why,
            "template": self.template,
            "example": self.example,
        }


class PromptSetError(UserError):
    """A prompt set that cannot be sent as the recipe asks, located at the recipe field at fault (`check` turns it
    into a finding there; the suite raises it as it is)."""

    def __init__(self, field: tuple[str, ...], detail: str):
        self.field, self.detail = field, detail
        super().__init__(f"{'.'.join(field)}: {detail}")


PROMPTS_FIELD, FORMAT_FIELD = ("validation", "prompts"), ("validation", "prompt_format")


def _at(p: Prompt) -> str:
    return f" ({p.where})" if p.where else ""


def _first_of(prompts: list[Prompt], what: str) -> str:
    """'prompt p2 (traffic.jsonl:3) is chat messages' or '4 prompts are chat messages (the first: p2 at ...)'."""
    first = prompts[0]
    if len(prompts) == 1:
        return f"prompt {first.id}{_at(first)} is {what}"
    where = f" at {first.where}" if first.where else ""
    return f"{len(prompts)} prompts are {what} (the first: {first.id}{where})"


def no_template(folder) -> str:
    return (
        f"the target's tokenizer ({folder}) has no chat template (chat_template.jinja, or chat_template in "
        "tokenizer_config.json)"
    )


def format_problem(prompts: list[Prompt], requested: str, template: str | None, missing: str) -> PromptSetError | None:
    """Why the prompts cannot be sent as validation.prompt_format asks (None: they can): chat asked or chat messages
    given while the target has no chat template (`missing` says why: none in its folder, or the tokenizer did not
    load), or chat messages sent raw."""
    chats = [p for p in prompts if p.messages is not None]
    if template is None and requested == "chat":
        return PromptSetError(
            FORMAT_FIELD,
            f"is chat but {missing} — set model.tokenizer to a folder with the target's chat template, or "
            "prompt_format: raw",
        )
    if template is None and chats:
        return PromptSetError(
            PROMPTS_FIELD,
            f"{_first_of(chats, 'chat messages')}, which need the target's chat template, but {missing} — give the "
            "prompts as text, or set model.tokenizer to a folder with the template",
        )
    if template is not None and requested == "raw" and chats:
        return PromptSetError(
            PROMPTS_FIELD,
            f"{_first_of(chats, 'chat messages')} but validation.prompt_format is raw — give them as text, or use "
            "prompt_format auto or chat",
        )
    return None


def apply_prompt_format(
    prompts: list[Prompt], requested: str, tokenizer, tokenizer_problem: str | None
) -> tuple[list[Prompt], PromptFormat]:
    """The prompts as they will be sent, and how (`validation.prompt_format`: auto | chat | raw). `tokenizer`: the
    target's ClientTokenizer (None: `tokenizer_problem` says why there is none). PromptSetError for a combination
    that cannot be sent: chat without a template, chat messages sent raw, a conversation the template refuses."""
    template = tokenizer.chat_template if tokenizer is not None else None
    missing = (
        f"the target's tokenizer could not be loaded ({tokenizer_problem})"
        if tokenizer is None
        else no_template(tokenizer.path)
    )
    problem = format_problem(prompts, requested, template, missing)
    if problem is not None:
        raise problem
    if template is None:
        why = "validation.prompt_format: raw" if requested == "raw" else f"auto: {missing}"
        return prompts, PromptFormat(requested, "raw", why, example=prompts[0].text if prompts else None)
    if requested == "raw":
        return prompts, PromptFormat(
            requested,
            "raw",
            f"validation.prompt_format: raw (the target's tokenizer has a chat template, {template}, not applied)",
            example=prompts[0].text if prompts else None,
        )
    rendered = []
    for p in prompts:
        try:
            rendered.append(replace(p, text=tokenizer.render_chat(p.conversation())))
        except ValueError as e:
            raise PromptSetError(
                PROMPTS_FIELD,
                f"prompt {p.id}{_at(p)}: {e} — fix the prompt's messages (roles and order), or set prompt_format: raw",
            ) from None
    why = (
        "validation.prompt_format: chat" if requested == "chat" else "auto: the target's tokenizer has a chat template"
    ) + "; text prompts are sent as one user message"
    return rendered, PromptFormat(
        requested, "chat", why, template=f"{tokenizer.path}/{template}", example=rendered[0].text if rendered else None
    )


# the client counts a prompt without special tokens; the server's preprocessing adds them (a beginning-of-sequence
# token), so a prompt is kept only with room for one
SERVER_ADDS = 1


@dataclass(frozen=True)
class LeftOut:
    """A prompt of the set that was not sent, and why."""

    id: str
    category: str
    why: str

    def to_dict(self) -> dict:
        return {"prompt": self.id, "category": self.category, "why": self.why}


def bundled_chats_unsendable(
    prompts: list[Prompt], tokenizer, requested: str = "auto"
) -> tuple[list[Prompt], list[LeftOut]]:
    """The bundled set's chat prompts need the target's chat template: without one, or with prompt_format raw, they
    are left out (a recipe's own chat prompts are refused instead, by apply_prompt_format)."""
    has_template = tokenizer is not None and tokenizer.chat_template is not None
    if has_template and requested != "raw":
        return prompts, []
    why = "chat messages, and " + (
        "validation.prompt_format is raw" if has_template else "the target's tokenizer has no chat template"
    )
    out = [LeftOut(p.id, p.category, why) for p in prompts if p.messages is not None]
    return [p for p in prompts if p.messages is None], out


def fit_to_limits(
    prompts: list[Prompt], tokenizer, max_input_len: int, max_seq_len: int, max_tokens: int
) -> tuple[list[Prompt], list[LeftOut], dict[str, int]]:
    """The prompts (as sent) that fit the deployment's limits, those that do not (longer than build.max_input_len,
    or with max_tokens beyond build.max_seq_len), and each prompt's length in the target's tokens (none without a
    tokenizer: then every prompt is kept). PromptSetError when none fits."""
    if tokenizer is None:
        return prompts, [], {}
    lengths = {p.id: len(tokenizer.encode(p.text)) for p in prompts}
    kept, out = [], []
    for p in prompts:
        n = lengths[p.id]
        sent = f"{n} tokens (+{SERVER_ADDS} the server's tokenizer may add)"
        if n + SERVER_ADDS > max_input_len:
            out.append(LeftOut(p.id, p.category, f"{sent} > build.max_input_len {max_input_len}"))
        elif n + SERVER_ADDS + max_tokens > max_seq_len:
            out.append(
                LeftOut(
                    p.id, p.category, f"{sent} + validation.max_tokens {max_tokens} > build.max_seq_len {max_seq_len}"
                )
            )
        else:
            kept.append(p)
    if not kept:
        where = next((f" at {p.where}" for p in prompts if p.id == out[0].id and p.where), "")
        raise PromptSetError(
            PROMPTS_FIELD,
            f"no prompt fits the deployment ({out[0].id}{where}: {out[0].why}) — give shorter prompts, or raise "
            "build.max_input_len / build.max_seq_len",
        )
    return kept, out, lengths


@dataclass(frozen=True)
class PreparedPrompts:
    """The prompt set as the suite sends it: the prompts (rendered), how, those left out and why, and each one's
    length as sent (target tokens; empty without a tokenizer)."""

    prompts: list[Prompt]
    prompt_format: PromptFormat
    left_out: list[LeftOut]
    lengths: dict[str, int]


def prepare_prompts(recipe: Recipe, prompts: list[Prompt], tokenizer, tokenizer_problem: str | None) -> PreparedPrompts:
    """What the suite sends of the loaded set, the one definition `check` runs too (so that it refuses what the
    suite would refuse, and lists what the suite would leave out): the bundled set's chats without a template left
    out, the prompt format applied, the prompts beyond the deployment's limits left out. PromptSetError for a set
    that cannot be sent."""
    left_out: list[LeftOut] = []
    requested = recipe.validation.prompt_format
    if recipe.validation.prompts is None:
        prompts, left_out = bundled_chats_unsendable(prompts, tokenizer, requested)
    prompts, prompt_format = apply_prompt_format(prompts, requested, tokenizer, tokenizer_problem)
    b = recipe.build
    prompts, too_long, lengths = fit_to_limits(
        prompts, tokenizer, b.max_input_len, b.max_seq_len, recipe.validation.max_tokens
    )
    return PreparedPrompts(prompts, prompt_format, left_out + too_long, lengths)
