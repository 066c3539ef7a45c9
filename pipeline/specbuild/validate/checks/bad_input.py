"""Bad input: malformed and hostile requests get a clean answer (an error message, or for harmless cases a
well-formed result), the server stays healthy, and a normal request right after still succeeds.

"Clean" means the server answered: an error in the response (HTTP status/JSON error, gRPC status), not a dropped
connection or a timeout. Cases marked `error` must be refused; `any` cases may also succeed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Callable

from specbuild.validate.checks.base import FAILED, PASSED, CheckResult, SuiteContext, timed
from specbuild.validate.client import Generation, GenerateParams

NAME, TITLE = "bad_input", "Bad input (clean errors, server stays healthy)"
HUGE = 2**31 - 1


@dataclass
class Case:
    name: str
    expect: str  # "error": must be refused; "any": refused or answered
    send: Callable[[SuiteContext], Generation]
    needs_grpc: bool = False


def _params(ctx: SuiteContext, **kw) -> GenerateParams:
    return GenerateParams(max_tokens=kw.pop("max_tokens", 8), **kw)


def _raw(ctx: SuiteContext, body: dict) -> Generation:
    return ctx.target.http().generate(ctx.target.model, None, _params(ctx), raw_body=json.dumps(body).encode())


def _too_long(ctx: SuiteContext) -> str:
    # Single characters separated by spaces: every tokenizer splits words, so this is > max_input_len tokens.
    n = ctx.recipe.build.max_input_len + 16
    return " ".join("abcdefghijklmnopqrstuvwxyz"[i % 26] for i in range(n))


def _grpc(ctx: SuiteContext, values: dict, **kw) -> Generation:
    session = ctx.target.grpc()
    gen = session.generate(ctx.target.model, ctx.target.signature, values, **kw)
    if not gen.ok:
        ctx.target.drop_grpc()
    return gen


def _cancel_grpc(ctx: SuiteContext) -> Generation:
    prompt = ctx.prompts[0].text
    gen = ctx.target.generate(prompt, ctx.greedy_params(max_tokens=max(ctx.max_tokens, 16)), "grpc", stop_after=1)
    return _as_cancel(gen)


def _cancel_http(ctx: SuiteContext) -> Generation:
    prompt = ctx.prompts[0].text
    gen = ctx.target.generate(prompt, ctx.greedy_params(max_tokens=max(ctx.max_tokens, 16)), "http-stream",
                              stop_after=1)
    return _as_cancel(gen)


def _as_cancel(gen: Generation) -> Generation:
    if gen.error == "cancelled by the client":  # we hung up on purpose: that is a clean outcome
        gen.error = None
        gen.final = True
    return gen


def cases(ctx: SuiteContext) -> list[Case]:
    first = ctx.prompts[0].text
    return [
        Case("empty prompt", "any", lambda c: c.target.generate("", _params(c))),
        Case("prompt longer than max_input_len", "error", lambda c: c.target.generate(_too_long(c), _params(c))),
        Case("max_tokens 0", "any", lambda c: c.target.generate(first, _params(c, max_tokens=0))),
        Case("max_tokens negative", "error", lambda c: c.target.generate(first, _params(c, max_tokens=-5))),
        Case("max_tokens huge", "any", lambda c: c.target.generate(first, _params(c, max_tokens=HUGE))),
        Case("max_tokens of the wrong type", "error",
             lambda c: _raw(c, {"text_input": first, "max_tokens": "ten"})),
        Case("temperature of the wrong type", "error",
             lambda c: _raw(c, {"text_input": first, "max_tokens": 4, "temperature": "hot"})),
        Case("unknown field (HTTP generate)", "any",
             lambda c: _raw(c, {"text_input": first, "max_tokens": 4, "top_k": 1, "no_such_field": 1})),
        Case("invalid UTF-8 prompt (gRPC)", "any",
             lambda c: _grpc(c, {"text_input": b"def f(\xff\xfe\xfd):\n", "max_tokens": 4, "top_k": 1}),
             needs_grpc=True),
        Case("unknown input tensor (gRPC)", "error",
             lambda c: _grpc(c, {"text_input": first, "max_tokens": 4, "no_such_input": 1}), needs_grpc=True),
        Case("client cancels mid-stream (gRPC)", "any", _cancel_grpc, needs_grpc=True),
        Case("client disconnects mid-stream (HTTP)", "any", _cancel_http),
    ]


def _clean(gen: Generation) -> bool:
    """The server answered (an error message or a complete result), rather than dropping or timing out."""
    if gen.ok:
        return gen.final
    err = gen.error or ""
    return not (err.startswith("connection error") or err.startswith("no final response"))


def _healthy(ctx: SuiteContext) -> str | None:
    """None when the target is live, its serving model ready and a normal request succeeds; else what is wrong."""
    dep = ctx.target
    try:
        if not dep.server.http.is_server_live():
            return "server not live"
    except Exception as e:  # noqa: BLE001
        return f"server unreachable: {type(e).__name__}: {e}"
    if not dep.server.model_ready(dep.model):
        return f"model {dep.model} not ready"
    follow = dep.generate(ctx.prompts[0].text, ctx.greedy_params(max_tokens=4))
    if not follow.ok or not follow.text:
        return f"a normal request right after failed: {follow.error or 'empty text'}"
    return None


@timed
def run(ctx: SuiteContext) -> CheckResult:
    rows, problems = [], []
    all_cases = cases(ctx)
    ctx.progress("bad input", 0, len(all_cases))
    for i, case in enumerate(all_cases, 1):
        if case.needs_grpc and not ctx.target.endpoints.grpc:
            rows.append({"case": case.name, "expect": case.expect, "outcome": "skipped (no --grpc-url)"})
            continue
        gen = case.send(ctx)
        outcome = "answered" if gen.ok else "refused"
        if case.send in (_cancel_grpc, _cancel_http) and gen.ok:
            outcome = f"cancelled by the client after {len(gen.chunks)} response(s)"
        row = {"case": case.name, "expect": case.expect, "outcome": outcome,
               "message": (gen.error or "")[:300], "tokens": gen.num_tokens if gen.ok else None}
        if not _clean(gen):
            problems.append(f"{case.name}: no clean answer ({gen.error})")
        elif case.expect == "error" and gen.ok:
            problems.append(f"{case.name}: accepted ({gen.num_tokens} tokens) but must be refused")
        limit = ctx.recipe.build.max_seq_len
        if case.name == "max_tokens huge" and gen.ok and gen.num_tokens is not None and gen.num_tokens > limit:
            problems.append(f"{case.name}: {gen.num_tokens} tokens > max_seq_len {limit}")
        unhealthy = _healthy(ctx)
        row["healthy_after"] = unhealthy is None
        if unhealthy:
            problems.append(f"after '{case.name}': {unhealthy}")
        rows.append(row)
        ctx.progress("bad input", i, len(all_cases))
    details = {"cases": rows, "problems": problems}
    if problems:
        return CheckResult(NAME, TITLE, FAILED, f"{len(problems)} problem(s): " + "; ".join(problems[:2]), details)
    ran = sum(1 for r in rows if not r["outcome"].startswith("skipped"))
    return CheckResult(NAME, TITLE, PASSED, f"{ran} cases answered cleanly; the server stayed healthy after each",
                       details)
