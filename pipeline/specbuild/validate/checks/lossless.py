"""Lossless: with greedy decoding the speculative deployment's tokens equal the baseline's, token for token, on
every prompt. A difference is reported with its first position and both continuations from there.

A deployment that returns no token ids (the llm-api contract: NVIDIA's llmapi model has no output_ids) is
compared text for text, character by character, and the report says so. A speculation that is not lossless by design
(the params' `not_lossless`: MTP's relaxed acceptance) is not compared: the check says it does not apply, and why."""

from __future__ import annotations

from specbuild.validate.checks.base import (
    FAILED,
    PASSED,
    SKIPPED,
    WARNED,
    CheckResult,
    SuiteContext,
    first_difference,
    timed,
)
from specbuild.validate.client import Generation

NAME, TITLE = "lossless", "Lossless (greedy, token for token vs baseline)"
SHOW = 16  # tokens of each continuation shown


def compare(ctx: SuiteContext, spec: Generation, base: Generation) -> dict | None:
    """None when equal; else where and how they differ."""
    if spec.ids is not None and base.ids is not None:
        i = first_difference(spec.ids, base.ids)
        if i is None:
            return None
        out = {
            "unit": "token",
            "position": i,
            "speculative_tokens": spec.ids[i : i + SHOW],
            "baseline_tokens": base.ids[i : i + SHOW],
            "speculative_length": len(spec.ids),
            "baseline_length": len(base.ids),
        }
        if ctx.tokenizer is not None:
            out["speculative_text"] = ctx.tokenizer.decode(spec.ids[i : i + SHOW])
            out["baseline_text"] = ctx.tokenizer.decode(base.ids[i : i + SHOW])
        else:
            j = first_difference(spec.text, base.text) or 0
            out["speculative_text"], out["baseline_text"] = spec.text[j : j + 60], base.text[j : j + 60]
        return out
    j = first_difference(spec.text, base.text)
    if j is None:
        return None
    return {
        "unit": "character",
        "position": j,
        "speculative_text": spec.text[j : j + 60],
        "baseline_text": base.text[j : j + 60],
    }


@timed
def run(ctx: SuiteContext) -> CheckResult:
    required = ctx.recipe.validation.require_lossless
    gate = "validation.require_lossless" if required else None
    if not ctx.spec.speculative:
        return CheckResult(NAME, TITLE, SKIPPED, "no speculation: nothing to compare", gate=gate)
    reason = ctx.spec.params.not_lossless() if ctx.spec.params is not None else None
    if reason is not None:  # the recipe asked for it (checks refuse it with require_lossless: true)
        return CheckResult(NAME, TITLE, SKIPPED, f"does not apply: {reason}", {"not_lossless": reason}, gate)
    if ctx.baseline is None:
        return CheckResult(NAME, TITLE, SKIPPED, "no baseline deployment given (--baseline-url)", gate=gate)
    spec = ctx.greedy_pass(ctx.target, "http")
    base = ctx.greedy_pass(ctx.baseline, "http")
    rows, diffs, errors = [], [], []
    for p, s, b in zip(ctx.prompts, spec, base):
        if not s.ok or not b.ok:
            errors.append(f"prompt {p.id}: " + (f"speculative: {s.error}" if not s.ok else f"baseline: {b.error}"))
            rows.append({"prompt": p.id, "equal": None})
            continue
        d = compare(ctx, s, b)
        rows.append({"prompt": p.id, "equal": d is None, "tokens": s.num_tokens})
        if d is not None:
            d["prompt"] = p.id
            diffs.append(d)
    by_text = any(r.get("equal") is not None for r in rows) and all(
        s.ids is None or b.ids is None for s, b in zip(spec, base) if s.ok and b.ok
    )
    unit = (
        "text (the deployment returns no token ids: NVIDIA's llmapi model has no output_ids)" if by_text else "tokens"
    )
    details = {"prompts": rows, "differences": diffs, "errors": errors, "compared": unit}
    compared = len(rows) - len(errors)
    if errors and not compared:
        return CheckResult(NAME, TITLE, FAILED, "no prompt could be compared: " + errors[0], details, gate)
    if diffs:
        d = diffs[0]
        summary = (
            f"{len(diffs)}/{compared} prompts differ; first: prompt {d['prompt']} at {d['unit']} "
            f"{d['position']}: speculative {d['speculative_text']!r} vs baseline {d['baseline_text']!r}"
        )
        return CheckResult(NAME, TITLE, FAILED if required else WARNED, summary, details, gate)
    if errors:
        return CheckResult(NAME, TITLE, FAILED, f"{len(errors)} request(s) failed: {errors[0]}", details, gate)
    how = "text for text (no token ids in the llm-api contract)" if by_text else "token for token"
    return CheckResult(NAME, TITLE, PASSED, f"{compared}/{compared} prompts identical {how}", details, gate)
