"""The prompt set: the recipe's (`validation.prompts`: a .txt file with one prompt per line, a .jsonl file with a
"prompt" field per line, a .json array of such objects, or an inline list) or the bundled one (prompts/default.json:
Python-flavoured prompts of three kinds: code completion, summarisation-like copying, chat-like questions in
comments; a .json file, so that it ships in the wheel's package data)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from specbuild.errors import UserError
from specbuild.safe_files import read_json, read_text

if TYPE_CHECKING:
    from specbuild.recipe.schema import Recipe

BUNDLED = Path(__file__).parent / "prompts" / "default.json"
MAX_PROMPT_FILE_BYTES = 16 << 20  # prompts for a validation run, not a data set
WHAT = "prompt file (validation.prompts)"


@dataclass(frozen=True)
class Prompt:
    index: int
    id: str
    kind: str
    text: str


def _from_items(items: list, where: str) -> list[Prompt]:
    out = []
    for n, item in enumerate(items, 1):
        if not isinstance(item, dict) or not isinstance(item.get("prompt"), str):
            raise UserError(f"{where} item {n}: each item must be a JSON object with a \"prompt\" string")
        out.append(Prompt(len(out), str(item.get("id", f"p{len(out)}")), str(item.get("kind", "custom")),
                          item["prompt"]))
    return out


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
            raise UserError(f"{path}:{lineno}: not valid JSON ({e}) — each line must be an object with a "
                            "\"prompt\" string") from None
        if not isinstance(item, dict) or not isinstance(item.get("prompt"), str):
            raise UserError(f"{path}:{lineno}: each line must be a JSON object with a \"prompt\" string")
        out.append(Prompt(len(out), str(item.get("id", f"p{len(out)}")), str(item.get("kind", "custom")),
                          item["prompt"]))
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
        return [Prompt(i, f"p{i}", "custom", text) for i, text in enumerate(value)]
    return load_prompt_file(recipe.resolve(value))
