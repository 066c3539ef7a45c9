"""Functional: the speculative deployment answers every prompt of the set with text of at most max_tokens tokens,
non-empty unless the baseline deployment answers that prompt with nothing too (the model ends at once: its answer,
not a deployment fault, noted by category); stop words end generation; exclude_input_in_output is honoured;
streaming (HTTP generate_stream and the gRPC stream) concatenates to exactly the non-streaming text and tokens."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from specbuild.validate.checks.base import FAILED, PASSED, CheckResult, SuiteContext, first_difference, timed
from specbuild.validate.client import Generation

if TYPE_CHECKING:
    from specbuild.recipe.prompts import Prompt

NAME, TITLE = "functional", "Functional (text, limits, stop words, echo, streaming)"
REPLACEMENT = "\ufffd"
SPLIT_HINT = (
    " (a multi-byte character was split between streamed responses and each part decoded alone: the "
    "streamed text shows U+FFFD where the whole text has the character)"
)


def _clip(s: str, n: int = 60) -> str:
    return s if len(s) <= n else s[:n] + "…"


def _same(a: Generation, b: Generation) -> bool:
    """Two successful answers are the same: token for token where both carry ids, else text for text."""
    return a.ids == b.ids if a.ids is not None and b.ids is not None else a.text == b.text


def _empty(ctx: SuiteContext, gens: list[Generation]) -> tuple[list[str], list[Prompt]]:
    """The prompts answered with no text: a problem each, unless the baseline deployment answers it the same (the
    model ends at once: its answer, not the deployment's fault); (problems, prompts answered empty as the
    baseline)."""
    empty = [(i, p) for i, (p, g) in enumerate(zip(ctx.prompts, gens)) if g.ok and not g.text]
    if not empty:
        return [], []
    if ctx.baseline is None:
        return [f"prompt {p.id}: empty text (no baseline deployment to compare with)" for _, p in empty], []
    base = ctx.greedy_pass(ctx.baseline, "http")  # cached: the lossless check reads the same pass
    problems, as_baseline = [], []
    for i, p in empty:
        b = base[i]
        if not b.ok:
            problems.append(f"prompt {p.id}: empty text (the baseline failed: {b.error})")
        elif _same(gens[i], b):
            as_baseline.append(p)
        else:
            problems.append(f"prompt {p.id}: empty text, where the baseline answers {_clip(b.text)!r}")
    return problems, as_baseline


def _empty_note(prompts: list[Prompt]) -> dict:
    by_category: dict[str, int] = {}
    for p in prompts:
        by_category[p.category] = by_category.get(p.category, 0) + 1
    return {"count": len(prompts), "by_category": by_category, "prompts": [p.id for p in prompts]}


def _basic(ctx: SuiteContext, gens: list[Generation]) -> tuple[list[str], list[dict]]:
    problems, rows = [], []
    for p, g in zip(ctx.prompts, gens):
        row = {
            "prompt": p.id,
            "category": p.category,
            "ok": g.ok,
            "tokens": g.num_tokens,
            "latency_s": round(g.latency, 4),
            "text": _clip(g.text, 120),
        }
        rows.append(row)
        if not g.ok:
            problems.append(f"prompt {p.id}: {g.error}")
            continue
        n = ctx.count_tokens(g)
        row["tokens"] = n
        if n is not None and n > ctx.max_tokens:
            problems.append(f"prompt {p.id}: {n} tokens > max_tokens {ctx.max_tokens}")
    return problems, rows


def _stream_matches(ctx: SuiteContext, plain: list[Generation], streamed: list[Generation], what: str) -> list[str]:
    problems = []
    for p, a, b in zip(ctx.prompts, plain, streamed):
        if not a.ok:
            continue
        if not b.ok:
            problems.append(f"prompt {p.id}: {what} failed: {b.error}")
        elif not b.final:
            problems.append(f"prompt {p.id}: {what} ended without its final response")
        elif b.text != a.text:
            i = first_difference(a.text, b.text)
            split = b.text[i : i + 1] == REPLACEMENT and a.text[i : i + 1] not in ("", REPLACEMENT)
            problems.append(
                f"prompt {p.id}: {what} text differs from the non-streaming text at character {i}: "
                f"{a.text[i : i + 20]!r} vs {b.text[i : i + 20]!r}" + (SPLIT_HINT if split else "")
            )
        elif a.ids is not None and b.ids is not None and a.ids != b.ids:
            problems.append(f"prompt {p.id}: {what} token ids differ at position {first_difference(a.ids, b.ids)}")
    return problems


_SPACE = re.compile(r"\s+")


def _squash(s: str) -> str:
    return _SPACE.sub("", s)


def _echo(ctx: SuiteContext, plain: list[Generation]) -> tuple[list[str], dict]:
    """exclude_input_in_output: false returns the prompt, then the same generated text."""
    problems: list[str] = []
    cases = [(p, g) for p, g in zip(ctx.prompts, plain) if g.ok][:2]
    shown = []
    for p, g in cases:
        echo = ctx.target.generate(p.text, ctx.greedy_params(exclude_input_in_output=False))
        if not echo.ok:
            problems.append(f"prompt {p.id}: exclude_input_in_output=false failed: {echo.error}")
            continue
        shown.append({"prompt": p.id, "text": _clip(echo.text, 120)})
        if not _squash(echo.text).startswith(_squash(p.text)) or not _squash(echo.text).endswith(_squash(g.text)):
            problems.append(
                f"prompt {p.id}: with exclude_input_in_output=false the text is not the prompt followed "
                f"by the generated text ({_clip(echo.text)!r})"
            )
        if (
            g.ids is not None
            and echo.ids is not None
            and (len(echo.ids) <= len(g.ids) or echo.ids[len(echo.ids) - len(g.ids) :] != g.ids)
        ):
            problems.append(
                f"prompt {p.id}: with exclude_input_in_output=false the token ids do not end with the generated ids"
            )
        elif g.ids is None and len(_squash(echo.text)) <= len(_squash(g.text)):
            problems.append(f"prompt {p.id}: exclude_input_in_output=false returned no more text than true")
    return problems, {"cases": shown}


def _pick_stop(ctx: SuiteContext, g: Generation) -> tuple[int, str] | None:
    """A generated token that round-trips through the tokenizer alone, at its first occurrence (not the first
    token), so that a stop word made of it must end generation right there."""
    tok = ctx.tokenizer
    if tok is None or g.ids is None or len(g.ids) < 3:
        return None
    later_first = list(range(max(1, len(g.ids) // 3), len(g.ids) - 1)) + list(range(1, max(1, len(g.ids) // 3)))
    for k in later_first:  # prefer a stop in the middle: with speculation it falls inside a multi-token step
        t = g.ids[k]
        if t in g.ids[:k]:
            continue
        word = tok.decode([t])
        if word.strip() and tok.encode(word) == [t]:
            return k, word
    return None


def _pick_stop_in_text(ctx: SuiteContext, g: Generation) -> tuple[int, str] | None:
    """Without token ids (llm-api): a token of the re-encoded text that round-trips alone and whose text first
    occurs where that token starts, so that a stop string made of it ends generation there whether the server
    matches stop strings by tokens (TensorRT-LLM's LLM) or by text."""
    tok = ctx.tokenizer
    if tok is None or g.ids is not None:
        return None
    ids = tok.encode(g.text)
    if len(ids) < 3:
        return None
    later_first = list(range(max(1, len(ids) // 3), len(ids) - 1)) + list(range(1, max(1, len(ids) // 3)))
    for k in later_first:
        word = tok.decode([ids[k]])
        if not word.strip() or tok.encode(word) != [ids[k]] or ids[k] in ids[:k]:
            continue
        if g.text.find(word) == len(tok.decode(ids[:k])):
            return k, word
    return None


def _stopped_there(g: Generation, stopped: Generation, word: str) -> bool:
    """The stopped text is the text before the stop string's first occurrence (the LLM API drops the stop string:
    include_stop_str_in_output is False)."""
    return (
        g.text.startswith(stopped.text)
        and word not in stopped.text
        and g.text[len(stopped.text) :].lstrip().startswith(word.strip())
    )


def _stop_words(ctx: SuiteContext, plain: list[Generation]) -> tuple[list[str], dict]:
    if ctx.tokenizer is None:
        return [], {"skipped": f"no client tokenizer: {ctx.tokenizer_problem or 'none loaded'}"}
    problems: list[str] = []
    tried = []
    for p, g in zip(ctx.prompts, plain):
        if len(tried) == 2:
            break
        if not g.ok:
            continue
        pick = _pick_stop(ctx, g) if g.ids is not None else _pick_stop_in_text(ctx, g)
        if pick is None:
            continue
        k, word = pick
        stopped = ctx.target.generate(p.text, ctx.greedy_params(stop_words=[word]))
        case = {"prompt": p.id, "stop_word": word, "position": k, "text": _clip(stopped.text)}
        tried.append(case)
        if not stopped.ok:
            problems.append(f"prompt {p.id}: request with stop word {word!r} failed: {stopped.error}")
            continue
        if g.ids is None:  # no ids (llm-api): the text must end right before the stop string
            if not _stopped_there(g, stopped, word):
                problems.append(
                    f"prompt {p.id}: stop string {word!r} (first in the text at character "
                    f"{g.text.find(word)}) did not end the text right before it: got "
                    f"{_clip(stopped.text)!r}"
                )
            continue
        want = {tuple(g.ids[: k + 1]), tuple(g.ids[:k])}  # the stop word kept (TensorRT-LLM) or removed
        if stopped.ids is not None and tuple(stopped.ids) not in want:
            problems.append(
                f"prompt {p.id}: stop word {word!r} (token {g.ids[k]} first generated at position {k}) "
                f"did not end generation there: got {len(stopped.ids)} tokens"
            )
        elif stopped.ids is None and not (g.text.startswith(stopped.text) and len(stopped.text) < len(g.text)):
            problems.append(f"prompt {p.id}: stop word {word!r} did not shorten the text to a prefix")
    if not tried:
        return [], {"skipped": "no generated token round-trips through the tokenizer alone"}
    return problems, {"cases": tried}


@timed
def run(ctx: SuiteContext) -> CheckResult:
    target = ctx.target
    plain = ctx.greedy_pass(target, "http")
    problems, rows = _basic(ctx, plain)
    empty_problems, as_baseline = _empty(ctx, plain)
    problems += empty_problems
    details: dict = {"prompts": rows}
    if as_baseline:
        details["empty_as_baseline"] = _empty_note(as_baseline)
    streamed = ctx.greedy_pass(target, "http-stream")
    problems += _stream_matches(ctx, plain, streamed, "HTTP generate_stream")
    details["streaming"] = {"decoupled": target.streams, "chunks_per_request": [len(g.chunks) for g in streamed]}
    if target.endpoints.grpc:
        problems += _stream_matches(ctx, plain, ctx.greedy_pass(target, "grpc"), "gRPC stream")
    else:
        details["grpc"] = "skipped: no --grpc-url"
    echo_problems, details["exclude_input_in_output"] = _echo(ctx, plain)
    stop_problems, details["stop_words"] = _stop_words(ctx, plain)
    problems += echo_problems + stop_problems
    details["problems"] = problems
    if problems:
        return CheckResult(NAME, TITLE, FAILED, f"{len(problems)} problem(s): " + "; ".join(problems[:2]), details)
    ok = sum(1 for g in plain if g.ok)
    notes = []
    if "skipped" in details["stop_words"]:
        notes.append("stop words not checked: " + details["stop_words"]["skipped"])
    if "grpc" in details:
        notes.append("gRPC not checked (no --grpc-url)")
    summary = f"{ok}/{len(plain)} prompts answered; streaming matches non-streaming"
    if as_baseline:
        counts = details["empty_as_baseline"]["by_category"]
        summary += (
            f"; {len(as_baseline)} answered with no text, as the baseline does token for token: the model ends at "
            "once (" + ", ".join(f"{category} {n}" for category, n in sorted(counts.items())) + ")"
        )
    return CheckResult(NAME, TITLE, PASSED, summary + (f" ({'; '.join(notes)})" if notes else ""), details)
