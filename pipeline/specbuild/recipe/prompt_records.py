"""The records a prompt dataset may hold (validation.prompts), one pydantic model per format, and which format a
record is, decided per record from its keys:

- text: `{"prompt": "..."}`
- chat: `{"messages": [{"role", "content"}, ...]}` (OpenAI style; content a string or a list of text parts)
- ShareGPT: `{"conversations": [{"from": "human"|"gpt"|"system", "value": "..."}, ...]}`
- request: an OpenAI chat-completion (or completion) request body, `{"model", "messages" | "prompt", ...}`, as
  a request log holds them, bare or as a Batch API line `{"custom_id", "method", "url", "body": {...}}`

Every record may carry an `id` and a `category` (the older name `kind` is read as the category; a request body
may carry it in `metadata.category`). A conversation's trailing assistant turns are the reply the suite asks the
deployment for: they are dropped, and what remains must end with a turn the model answers.

A record's other keys (the metadata real traffic carries: a log's `source`, a timestamp, a user id; a request's
sampling fields) are ignored, and named in `fields["ignored"]` so the loader can say once which were; what a
format defines must be well formed (the recipe's own inline prompts stay strict: recipe/schema.py).

A request record's sampling settings (`RequestSampling`: temperature, top_p, top_k, the penalties, seed, max_tokens)
are also read, into `fields["sampling"]`, for `specbuild adapt`'s teacher pass, which answers the way production
was asked (docs/adapt.md); the validation suite does not replay them (it decodes greedily), so they stay among the
keys it names as ignored."""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

NonEmpty = Annotated[str, Field(min_length=1)]
Ident = Union[str, int]


class TextPart(BaseModel):
    """A text part of an OpenAI message's content list (other parts, images or audio, cannot be sent)."""

    model_config = ConfigDict(extra="forbid")
    type: Literal["text"]
    text: str


class Message(BaseModel):
    """An OpenAI-style chat message (fields beyond role and content, e.g. name, are not sent)."""

    model_config = ConfigDict(extra="ignore")
    role: NonEmpty
    content: Union[str, list[TextPart]]

    @field_validator("content", mode="before")
    @classmethod
    def _text_parts_only(cls, value):
        if isinstance(value, list):
            for i, part in enumerate(value, 1):
                if isinstance(part, dict) and part.get("type") != "text":
                    raise ValueError(f"part {i} is {part.get('type')}: only text parts can be sent")
        return value

    @property
    def text(self) -> str:
        return self.content if isinstance(self.content, str) else "".join(p.text for p in self.content)


class _Labelled(BaseModel):
    model_config = ConfigDict(extra="ignore")  # a traffic file's metadata (named by `ignored_keys`)
    id: Ident | None = None
    category: NonEmpty | None = None
    kind: NonEmpty | None = None  # the older name of category


class TextRecord(_Labelled):
    prompt: str


class ChatRecord(_Labelled):
    messages: Annotated[list[Message], Field(min_length=1)]


SHAREGPT_ROLES = {
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "chatgpt": "assistant",
    "bard": "assistant",
    "bing": "assistant",
    "model": "assistant",
    "system": "system",
}


class ShareGPTTurn(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)
    speaker: Literal[tuple(SHAREGPT_ROLES)] = Field(alias="from")
    value: str


class ShareGPTRecord(BaseModel):
    model_config = ConfigDict(extra="ignore")  # ShareGPT dumps carry more (model, language, ...)
    id: Ident | None = None
    category: NonEmpty | None = None
    conversations: Annotated[list[ShareGPTTurn], Field(min_length=1)]


Probability = Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)]
Finite = Annotated[float, Field(allow_inf_nan=False)]


class RequestSampling(BaseModel):
    """The sampling settings an OpenAI request body gives (OpenAI's names; top_k and repetition_penalty as
    TensorRT-LLM's and vLLM's OpenAI servers take them); None: not given. Read only by adapt's teacher pass."""

    model_config = ConfigDict(extra="ignore", frozen=True)
    temperature: Annotated[float, Field(ge=0.0, allow_inf_nan=False)] | None = None
    top_p: Probability | None = None
    top_k: Annotated[int, Field(ge=-1)] | None = None  # -1 / 0: off (vLLM / TensorRT-LLM)
    presence_penalty: Finite | None = None
    frequency_penalty: Finite | None = None
    repetition_penalty: Annotated[float, Field(gt=0.0, allow_inf_nan=False)] | None = None
    seed: int | None = None
    max_tokens: Annotated[int, Field(ge=1)] | None = None
    max_completion_tokens: Annotated[int, Field(ge=1)] | None = None  # OpenAI's newer name of max_tokens

    @property
    def given(self) -> dict:
        return self.model_dump(exclude_none=True)


def request_sampling(body: dict) -> RequestSampling | None:
    """A request body's sampling settings (None when it gives none). RecordProblem when one is malformed."""
    try:
        sampling = RequestSampling.model_validate(body)
    except ValidationError as e:
        raise RecordProblem(
            f"a request record, but its sampling setting {_first_error(e)} — fix the value or remove it"
        ) from None
    return sampling if sampling.given else None


class RequestMetadata(BaseModel):
    model_config = ConfigDict(extra="ignore")
    category: NonEmpty | None = None


class ChatRequest(BaseModel):
    """An OpenAI chat-completion request body; its sampling fields are not replayed (the suite decodes greedily
    with validation.max_tokens)."""

    model_config = ConfigDict(extra="ignore")
    model: str
    messages: Annotated[list[Message], Field(min_length=1)]
    metadata: RequestMetadata | None = None
    category: NonEmpty | None = None
    id: Ident | None = None


class CompletionRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")
    model: str
    prompt: str
    metadata: RequestMetadata | None = None
    category: NonEmpty | None = None
    id: Ident | None = None


class BatchLine(BaseModel):
    """One line of an OpenAI Batch API input file: a request body and its custom_id."""

    model_config = ConfigDict(extra="ignore")
    custom_id: Ident | None = None
    method: str | None = None
    url: str | None = None
    body: dict


FORMATS = (
    'text {"prompt"}, chat {"messages"}, ShareGPT {"conversations"}, or an OpenAI request body '
    '{"model", "messages"} (bare or as a Batch API line with "body")'
)


class RecordProblem(ValueError):
    """What is wrong with one record and what to do (the caller adds where it is)."""


def _first_error(e: ValidationError) -> str:
    err = e.errors()[0]
    loc = ".".join(str(p) for p in err["loc"])
    return f"{loc}: {err['msg']}" if loc else err["msg"]


SHAPES = {
    "text": '{"prompt": "..."} with an optional "id" and "category"',
    "chat": '{"messages": [{"role": "user", "content": "..."}, ...]} (a non-empty list; content a '
    'string or a list of {"type": "text", "text"} parts) with an optional "id" and "category"',
    "ShareGPT": '{"conversations": [{"from": "human", "value": "..."}, ...]} (from: ' + ", ".join(SHAREGPT_ROLES) + ")",
    "chat-completion request": 'an OpenAI chat-completion body {"model": "...", "messages": [{"role", '
    '"content"}, ...], ...}',
    "completion request": 'an OpenAI completion body {"model": "...", "prompt": "...", ...}',
    "Batch API": '{"custom_id": "...", "body": {<a chat-completion request body>}}',
}


def _model(cls, item: dict, what: str):
    try:
        return cls.model_validate(item)
    except ValidationError as e:
        raise RecordProblem(f"a {what} record, but {_first_error(e)} — write it as {SHAPES[what]}") from None


def ignored_keys(cls: type[BaseModel], item: dict) -> tuple[str, ...]:
    """The record's top-level keys its format does not define (read under their aliases, as pydantic reads them)."""
    known = {f.alias or name for name, f in cls.model_fields.items()}
    return tuple(str(k) for k in item if k not in known)


def _turns(messages: list[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    """The conversation up to the reply asked for: trailing assistant turns dropped."""
    while messages and messages[-1][0] == "assistant":
        messages = messages[:-1]
    if not messages:
        raise RecordProblem(
            "the conversation has only assistant turns — give at least one turn for the model to answer (a user turn)"
        )
    return tuple(messages)


def _message_turns(messages: list[Message]) -> tuple[tuple[str, str], ...]:
    return _turns([(m.role, m.text) for m in messages])


def parse_record(item) -> tuple[str, dict]:
    """(format, fields): fields has `text` (str) or `turns` ((role, content), ...), `id`, `category` (each None
    when the record has none) and `ignored` (the keys the format does not define, e.g. ("source", "timestamp")).
    RecordProblem when it is none of the formats or a malformed one."""
    if not isinstance(item, dict):
        raise RecordProblem(f"a record must be a JSON object, not {type(item).__name__} — give one of: {FORMATS}")
    if "body" in item and isinstance(item.get("body"), dict):
        line = _model(BatchLine, item, "Batch API")
        fmt, fields = parse_record(line.body)
        if fields["id"] is None and line.custom_id is not None:
            fields["id"] = str(line.custom_id)
        fields["ignored"] = ignored_keys(BatchLine, item) + tuple(f"body.{k}" for k in fields["ignored"])
        return "request", fields
    if "conversations" in item:
        rec = _model(ShareGPTRecord, item, "ShareGPT")
        turns = _turns([(SHAREGPT_ROLES[t.speaker], t.value) for t in rec.conversations])
        return "sharegpt", {
            "turns": turns,
            "id": rec.id,
            "category": rec.category,
            "ignored": ignored_keys(ShareGPTRecord, item),
        }
    if "model" in item and ("messages" in item or "prompt" in item):
        request: ChatRequest | CompletionRequest
        if "messages" in item:
            request = _model(ChatRequest, item, "chat-completion request")
            fields: dict = {"turns": _message_turns(request.messages)}
        else:
            request = _model(CompletionRequest, item, "completion request")
            fields = {"text": request.prompt}
        category = request.category or (request.metadata.category if request.metadata else None)
        return "request", {
            **fields,
            "id": request.id,
            "category": category,
            "ignored": ignored_keys(type(request), item),
            "sampling": request_sampling(item),
        }
    if ("prompt" in item) == ("messages" in item):
        raise RecordProblem(
            f'the record has {"both" if "prompt" in item else "neither"} "prompt" and '
            f'"messages" — give one of: {FORMATS}'
        )
    if "messages" in item:
        chat = _model(ChatRecord, item, "chat")
        return "chat", {
            "turns": _message_turns(chat.messages),
            "id": chat.id,
            "category": chat.category or chat.kind,
            "ignored": ignored_keys(ChatRecord, item),
        }
    text = _model(TextRecord, item, "text")
    return "text", {
        "text": text.prompt,
        "id": text.id,
        "category": text.category or text.kind,
        "ignored": ignored_keys(TextRecord, item),
    }
