"""The target's tokenizer on the client side, when its folder is on this machine: `check` (the prompt set as it will
be sent: chat templates, token lengths), and the validation suite's stop-word check and token counts of the llm-api
contract (no ids in its responses) need it.

    tok = load_tokenizer(folder)        # TokenizerUnavailable(reason) when nothing in the folder loads
    tok.encode(text), tok.decode(ids), tok.chat_template, tok.render_chat(messages)

Which reader:
- `tokenizer.json`: the `tokenizers` library (cheap);
- otherwise transformers' AutoTokenizer, loaded as the served preprocessing loads it (`legacy=False`); a folder with
  only a SentencePiece `tokenizer.model` (vicuna and other Llama-1/2-era checkpoints) goes this way and needs the
  `sentencepiece` package (the `reference` extra).
When none works, `TokenizerUnavailable` says what was tried and why it failed, for the checks to report.

Chat templates: the folder's `chat_template.jinja`, else the `chat_template` of its `tokenizer_config.json`, as
transformers reads them; `render_chat` applies it through transformers' `apply_chat_template` with the
generation prompt, the way an OpenAI-style chat endpoint renders a conversation.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from specbuild.files.safe_files import UnreadableFile, read_json

TEMPLATE_FILE = "chat_template.jinja"
CONFIG_FILE = "tokenizer_config.json"
SENTENCEPIECE_FILE = "tokenizer.model"
MAX_CONFIG_BYTES = 16 << 20


class TokenizerUnavailable(Exception):
    """No tokenizer could be loaded from a folder; the message says why (for reports)."""


@dataclass
class ClientTokenizer:
    path: Path
    reader: str  # what read it, for reports: "tokenizer.json (tokenizers)", ...
    _encode: Callable[[str], list[int]]
    _decode: Callable[[list[int]], str]
    chat_template: str | None = None  # where the folder's chat template is, for reports; None: it has none
    _transformers: Any = field(default=None, repr=False)  # AutoTokenizer, loaded when a template is rendered

    def encode(self, text: str) -> list[int]:
        """Token ids without special tokens (as the preprocessing model encodes stop words)."""
        return list(self._encode(text))

    def decode(self, ids: list[int]) -> str:
        return self._decode(list(ids))

    def describe(self) -> str:
        return f"{self.path} ({self.reader})"

    def render_chat(self, messages: list[dict[str, str]]) -> str:
        """The conversation as the target's chat template writes it, ending with the assistant's turn opened.
        A beginning-of-sequence token the template writes first is left out when the tokenizer adds it to every
        text it encodes (the served preprocessing encodes prompts with their special tokens): the server then
        sees one, as the model did in training. ValueError when the template refuses the conversation."""
        if self.chat_template is None:
            raise ValueError(f"{self.path} has no chat template")
        tok = self._transformers or _auto_tokenizer(self.path)
        self._transformers = tok
        try:
            text = tok.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=True)
        except Exception as e:  # noqa: BLE001 - jinja's raise_exception, a template error
            raise ValueError(f"the chat template of {self.path} refused it: {type(e).__name__}: {e}") from None
        bos = getattr(tok, "bos_token", None)
        if bos and text.startswith(bos) and _adds_bos(tok):
            text = text[len(bos) :]
        return text


def chat_template_source(folder: Path) -> str | None:
    """Where the folder's chat template is (the file name), or None: chat_template.jinja first, as transformers
    reads it before tokenizer_config.json's chat_template (a string, or a list of named templates)."""
    if (folder / TEMPLATE_FILE).is_file():
        return TEMPLATE_FILE
    try:
        config = read_json(folder / CONFIG_FILE, what="tokenizer config", max_bytes=MAX_CONFIG_BYTES)
    except (UnreadableFile, OSError):
        return None
    return f"{CONFIG_FILE} (chat_template)" if config.get("chat_template") else None


def _adds_bos(tok) -> bool:
    bos_id = getattr(tok, "bos_token_id", None)
    ids = tok.encode("a", add_special_tokens=True)
    return bos_id is not None and bool(ids) and ids[0] == bos_id


def _auto_tokenizer(folder: Path):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a local folder: never ask the hub
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(folder), legacy=False)


def _sentencepiece_problem() -> str | None:
    """Why transformers cannot read a SentencePiece model here, when the reason is the sentencepiece package."""
    if importlib.util.find_spec("sentencepiece") is None:
        return (
            "tokenizer.model is a SentencePiece model, which needs the sentencepiece package — "
            "pip install 'specbuild[reference]'"
        )
    try:  # transformers reads the model through this protobuf module; its runtime check refuses other protobufs
        from sentencepiece import sentencepiece_model_pb2  # noqa: F401
    except Exception as e:  # noqa: BLE001
        from importlib import metadata

        return (
            f"the installed sentencepiece {metadata.version('sentencepiece')} cannot read tokenizer.model with "
            f"this protobuf ({type(e).__name__}: {str(e).splitlines()[0][:200]}) — install the sentencepiece "
            "version specbuild's reference extra names (pip install 'specbuild[reference]')"
        )
    return None


def _first_line(e: Exception) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0][:300] if text else ''}"


def load_tokenizer(folder: Path | None) -> ClientTokenizer:
    """The tokenizer in `folder`. TokenizerUnavailable with the reason when there is none to load."""
    if folder is None:
        raise TokenizerUnavailable("no tokenizer folder given")
    folder = Path(folder)
    if not folder.is_dir():
        raise TokenizerUnavailable(f"{folder} is not a folder on this machine")
    template = chat_template_source(folder)
    tried = []
    if (folder / "tokenizer.json").is_file():
        try:
            from tokenizers import Tokenizer

            tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
            return ClientTokenizer(
                folder,
                "tokenizer.json (tokenizers)",
                lambda t: tok.encode(t, add_special_tokens=False).ids,
                lambda ids: tok.decode(ids, skip_special_tokens=True),
                template,
            )
        except Exception as e:  # noqa: BLE001 - transformers may still read the folder
            tried.append(f"tokenizer.json: {_first_line(e)}")
    sentencepiece = (folder / SENTENCEPIECE_FILE).is_file() and not (folder / "tokenizer.json").is_file()
    if not tried and not sentencepiece and not (folder / CONFIG_FILE).is_file():
        raise TokenizerUnavailable(
            f"no tokenizer in {folder} (no tokenizer.json, {SENTENCEPIECE_FILE} or {CONFIG_FILE})"
        )
    try:
        tok = _auto_tokenizer(folder)
    except Exception as e:  # noqa: BLE001
        why = (_sentencepiece_problem() if sentencepiece else None) or f"transformers: {_first_line(e)}"
        raise TokenizerUnavailable(f"{folder}: " + "; ".join(tried + [why])) from None
    reader = (
        f"{SENTENCEPIECE_FILE} (SentencePiece, through transformers)"
        if sentencepiece
        else f"transformers {type(tok).__name__}"
    )
    return ClientTokenizer(
        folder,
        reader,
        lambda t: tok.encode(t, add_special_tokens=False),
        lambda ids: tok.decode(ids, skip_special_tokens=True),
        template,
        tok,
    )
