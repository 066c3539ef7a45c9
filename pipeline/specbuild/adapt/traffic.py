"""The traffic adapt learns from: read as `validate` reads prompts, formatted as it sends them, tokenized as the
served preprocessing tokenizes them.

    traffic = read_traffic(build, path, max_tokens)   # UserError (exit 2) for unreadable or empty input

Any format validation.prompts takes (recipe/prompts.py: .txt, .jsonl, .json of text, chat, ShareGPT or OpenAI
request records, with an optional category), through validation.prompt_format and the target's chat template
(recipe/prompts.py `apply_prompt_format`: chat records without a template are refused there, as `check` refuses
them), then kept when they fit build.max_input_len and build.max_seq_len with `max_tokens` answer tokens
(`fit_to_limits`; the others are listed, not sent). Each record's digest identifies it: sha256 of its category and
its text as sent, so two identical records are one record (never in two parts of the split; the first one's
sampling settings are kept). A request record's sampling settings ride along for the teacher pass
(specbuild.adapt.sampling)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from specbuild.errors import UserError
from specbuild.recipe.prompt_records import RequestSampling
from specbuild.recipe.prompts import (
    LeftOut,
    Prompt,
    PromptFormat,
    apply_prompt_format,
    bundled_chats_unsendable,
    fit_to_limits,
    load_prompt_file,
    load_prompts,
)
from specbuild.runtimes.build import Build
from specbuild.checkpoints.client_tokenizer import TokenizerUnavailable, load_tokenizer


@dataclass(frozen=True)
class Record:
    """One prompt of the traffic, as the deployment receives it."""

    id: str
    category: str
    text: str  # as sent (chat records rendered by the target's chat template)
    ids: tuple[int, ...]  # the prompt's token ids as the served preprocessing encodes it (special tokens added)
    digest: str  # sha256 of (category, text): identical records share it
    sampling: RequestSampling | None = None  # a request record's sampling settings (adapt/sampling.py)

    def to_dict(self) -> dict:
        out = {"id": self.id, "category": self.category, "prompt_tokens": len(self.ids), "digest": self.digest}
        return {**out, "sampling": self.sampling.given} if self.sampling is not None else out

    @property
    def identity(self) -> str:
        """The digest, and the sampling settings the record was asked with (what its teacher answer depends on)."""
        return self.digest if self.sampling is None else f"{self.digest} {json.dumps(self.sampling.given)}"


@dataclass(frozen=True)
class Traffic:
    source: str  # the file read, or what stood in for it ("validation.prompts", "the bundled prompt set")
    records: list[Record]
    prompt_format: PromptFormat
    left_out: list[LeftOut] = field(default_factory=list)
    duplicates: int = 0  # records dropped because an identical one (same category and text) came first
    end_id: int | None = None  # what the served preprocessing ends answers with (the tokenizer's eos)
    pad_id: int | None = None

    @property
    def digest(self) -> str:
        """The traffic's identity: its records' digests (and sampling settings) in order."""
        return hashlib.sha256("\n".join(r.identity for r in self.records).encode()).hexdigest()

    def categories(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for r in self.records:
            counts[r.category] = counts.get(r.category, 0) + 1
        return counts


def record_digest(category: str, text: str) -> str:
    return hashlib.sha256(json.dumps([category, text]).encode()).hexdigest()


def _source(build: Build, path: Path | None) -> tuple[list[Prompt], str, bool]:
    """The prompts, what they came from, and whether they are the bundled set."""
    recipe = build.recipe
    if path is not None:
        return load_prompt_file(Path(path)), str(path), False
    value = recipe.adapt.traffic if recipe.adapt is not None else None
    if value is not None:
        resolved = recipe.resolve(value)
        return load_prompt_file(resolved), str(resolved), False
    if recipe.validation.prompts is None:
        return load_prompts(recipe), "the bundled prompt set (no traffic given: --traffic, adapt.traffic)", True
    if isinstance(recipe.validation.prompts, list):
        return load_prompts(recipe), "validation.prompts (inline)", False
    return load_prompts(recipe), str(recipe.resolve(recipe.validation.prompts)), False


def served_ids(tokenizer_dir: Path, texts: list[str]) -> tuple[list[list[int]], int | None, int | None]:
    """The token ids the served preprocessing model sends the core for each text, and its end and pad ids
    (transformers' AutoTokenizer of the target's tokenizer folder, legacy=False, special tokens added; end = eos,
    pad = pad else eos: repository/engine/models/preprocessing/model.py)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir), legacy=False)
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    ids = [tokenizer.encode(text, add_special_tokens=True) for text in texts]
    return ids, eos, pad if pad is not None else eos


def read_traffic(build: Build, path: Path | None, max_tokens: int) -> Traffic:
    """The traffic's records as sent. UserError (exit 2) when it cannot be read, holds no prompt, or no prompt fits
    the deployment's limits."""
    recipe = build.recipe
    prompts, source, bundled = _source(build, path)
    try:
        tokenizer, problem = load_tokenizer(recipe.tokenizer_dir), None
    except TokenizerUnavailable as e:
        tokenizer, problem = None, str(e)
    if tokenizer is None:
        raise UserError(
            f"adapt: the target's tokenizer cannot be loaded ({problem}) — the teacher pass tokenizes every prompt "
            "as the server does; set model.tokenizer to the target's tokenizer folder"
        )
    left_out: list[LeftOut] = []
    if bundled:
        prompts, left_out = bundled_chats_unsendable(prompts, tokenizer, recipe.validation.prompt_format)
    prompts, prompt_format = apply_prompt_format(prompts, recipe.validation.prompt_format, tokenizer, problem)
    prompts, too_long, _ = fit_to_limits(
        prompts, tokenizer, recipe.build.max_input_len, recipe.build.max_seq_len, max_tokens
    )
    left_out += too_long
    seen: set[str] = set()
    kept: list[Prompt] = []
    digests: list[str] = []
    for p in prompts:
        digest = record_digest(p.category, p.text)
        if digest not in seen:
            seen.add(digest)
            kept.append(p)
            digests.append(digest)
    if not kept:
        raise UserError(f"adapt: {source} holds no prompt to adapt on — give a traffic file with --traffic")
    ids, end_id, pad_id = served_ids(recipe.tokenizer_dir, [p.text for p in kept])
    records = [Record(p.id, p.category, p.text, tuple(i), d, p.sampling) for p, i, d in zip(kept, ids, digests)]
    return Traffic(source, records, prompt_format, left_out, len(prompts) - len(kept), end_id, pad_id)
