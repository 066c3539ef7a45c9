"""Bad input: malformed and hostile requests get a clean answer (an error message, or for harmless cases a
well-formed result), the server stays healthy, and a normal request right after still succeeds.

"Clean" means the server answered: an error in the response (HTTP status/JSON error, gRPC status), not a dropped
connection or a timeout. Cases marked `error` must be refused; `any` cases may also succeed.

Beyond wrong values and types: sampling values out of range (negative, NaN and infinite temperature, top_p > 1,
negative top_k: TensorRT-LLM's SamplingConfig checks, `cpp/tensorrt_llm/executor/samplingConfig.cpp`; a huge top_k
may be served), a request without max_tokens, end/pad ids outside any vocabulary, inputs of the wrong shape or
data type and a request batch above max_batch_size (Triton refuses those before the model runs), and client
cancellation. The load check sends the same cases amid good requests (validate/mix.py).

The cases follow the deployment's contract: the engine flavour's ensemble/BLS tensors, or NVIDIA's llmapi model
(llmapi model.py@b35ac1b): `sampling_param_*` inputs, the LLM's own limits (a prompt over max_num_tokens
is refused by `LLM._check_arguments`; max_input_len is not checked there), the `stop` request with and without
a request id, and a `stop` that cancels a running stream.
"""

from __future__ import annotations

import json
import math
import threading
import time
from dataclasses import dataclass
from typing import Callable

from specbuild.facts.engine_facts import DEFAULT_MAX_NUM_TOKENS
from specbuild.validate.checks.base import FAILED, PASSED, CheckResult, SuiteContext, timed
from specbuild.validate.client import Generation, GenerateParams, new_request_id

NAME, TITLE = "bad_input", "Bad input (clean errors, server stays healthy)"
HUGE = 2**31 - 1


@dataclass
class Case:
    name: str
    expect: str  # "error": must be refused; "any": refused or answered
    send: Callable[[SuiteContext], Generation]
    needs_grpc: bool = False

    @property
    def ended_by_client(self) -> bool:
        """The client ends the request itself mid-stream (hangs up, cancels it, stops it by request id): a bad
        request the server neither refuses nor answers; what is asked of it is a clean end and a healthy server."""
        return self.send in ENDED_BY_CLIENT


def _params(ctx: SuiteContext, **kw) -> GenerateParams:
    return GenerateParams(max_tokens=kw.pop("max_tokens", 8), **kw)


def _raw(ctx: SuiteContext, body: dict) -> Generation:
    return ctx.target.http().generate(ctx.target.model, None, _params(ctx), raw_body=json.dumps(body).encode())


def _too_long(ctx: SuiteContext) -> str:
    # Single characters separated by spaces: every tokenizer splits words, so this is > max_input_len tokens.
    n = ctx.recipe.build.max_input_len + 16
    return " ".join("abcdefghijklmnopqrstuvwxyz"[i % 26] for i in range(n))


def _raw_sampling(ctx: SuiteContext, **values) -> Generation:
    """HTTP generate with the first prompt, 4 tokens and these inputs, in the deployment's tensor names."""
    body = ctx.target.contract.inputs(
        _params(ctx, max_tokens=4, return_perf_metrics=False, exclude_input_in_output=None),
        ctx.prompts[0].text,
        stream=False,
    )
    for name in [k for k in body if k.endswith("top_k")]:
        del body[name]  # the greedy top_k 1 would decide the strategy: leave the value under test alone
    body.update(values)
    return _raw(ctx, body)


def _grpc_sampling(ctx: SuiteContext, **values) -> Generation:
    """The same over gRPC (JSON cannot carry NaN or infinity)."""
    body = ctx.target.contract.inputs(
        _params(ctx, max_tokens=4, return_perf_metrics=False, exclude_input_in_output=None),
        ctx.prompts[0].text,
        stream=False,
    )
    for name in [k for k in body if k.endswith("top_k")]:
        del body[name]
    body.update(values)
    return _grpc(ctx, body)


def _max_tokens_name(ctx: SuiteContext) -> str:
    return "max_tokens" if ctx.target.contract.name == "engine" else "sampling_param_max_tokens"


def _wrong_shape(ctx: SuiteContext) -> Generation:
    """max_tokens sent as three values where the model declares one."""
    name = _max_tokens_name(ctx)
    batch = ctx.target.signature.max_batch_size > 0
    return _grpc(ctx, {"text_input": ctx.prompts[0].text, name: [4, 4, 4]}, shapes={name: (1, 3) if batch else (3,)})


def _wrong_dtype(ctx: SuiteContext, name: str, value, data_type: str) -> Generation:
    other = {"text_input": ctx.prompts[0].text, _max_tokens_name(ctx): 4}
    other[name] = value
    return _grpc(ctx, other, type_overrides={name: data_type})


def _batch_too_large(ctx: SuiteContext) -> Generation:
    """max_batch_size + 1 rows in one request (a model without batching: a 2-D text_input)."""
    n = ctx.target.signature.max_batch_size
    name = _max_tokens_name(ctx)
    if n <= 0:
        return _grpc(ctx, {"text_input": [ctx.prompts[0].text] * 2, name: 4}, shapes={"text_input": (1, 2)})
    return _grpc(
        ctx,
        {"text_input": [ctx.prompts[0].text] * (n + 1), name: [4] * (n + 1)},
        shapes={"text_input": (n + 1, 1), name: (n + 1, 1)},
    )


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
    gen = ctx.target.generate(
        prompt, ctx.greedy_params(max_tokens=max(ctx.max_tokens, 16)), "http-stream", stop_after=1
    )
    return _as_cancel(gen)


def _as_cancel(gen: Generation) -> Generation:
    if gen.error == "cancelled by the client":  # we hung up on purpose: that is a clean outcome
        gen.error = None
        gen.final = True
    return gen


def engine_cases(ctx: SuiteContext) -> list[Case]:
    first = ctx.prompts[0].text
    return [
        Case("empty prompt", "any", lambda c: c.target.generate("", _params(c))),
        Case("prompt longer than max_input_len", "error", lambda c: c.target.generate(_too_long(c), _params(c))),
        Case("max_tokens 0", "any", lambda c: c.target.generate(first, _params(c, max_tokens=0))),
        Case("max_tokens negative", "error", lambda c: c.target.generate(first, _params(c, max_tokens=-5))),
        Case("max_tokens huge", "any", lambda c: c.target.generate(first, _params(c, max_tokens=HUGE))),
        Case("max_tokens of the wrong type", "error", lambda c: _raw(c, {"text_input": first, "max_tokens": "ten"})),
        Case(
            "temperature of the wrong type",
            "error",
            lambda c: _raw(c, {"text_input": first, "max_tokens": 4, "temperature": "hot"}),
        ),
        Case(
            "unknown field (HTTP generate)",
            "any",
            lambda c: _raw(c, {"text_input": first, "max_tokens": 4, "top_k": 1, "no_such_field": 1}),
        ),
        Case(
            "invalid UTF-8 prompt (gRPC)",
            "any",
            lambda c: _grpc(c, {"text_input": b"def f(\xff\xfe\xfd):\n", "max_tokens": 4, "top_k": 1}),
            needs_grpc=True,
        ),
        Case(
            "unknown input tensor (gRPC)",
            "error",
            lambda c: _grpc(c, {"text_input": first, "max_tokens": 4, "no_such_input": 1}),
            needs_grpc=True,
        ),
        Case("max_tokens missing", "error", lambda c: _raw(c, {"text_input": first})),
        Case("temperature negative", "error", lambda c: _raw_sampling(c, temperature=-1.0)),
        Case("temperature NaN (gRPC)", "error", lambda c: _grpc_sampling(c, temperature=math.nan), needs_grpc=True),
        Case(
            "temperature infinite (gRPC)", "error", lambda c: _grpc_sampling(c, temperature=math.inf), needs_grpc=True
        ),
        Case("top_p above 1", "error", lambda c: _raw_sampling(c, top_p=2.0, temperature=1.0)),
        Case("top_k negative", "error", lambda c: _raw_sampling(c, top_k=-1, temperature=1.0)),
        Case("top_k huge", "any", lambda c: _raw_sampling(c, top_k=HUGE, temperature=1.0)),
        # TensorRT-LLM does not check end_id/pad_id against the vocabulary; the reference runtime refuses them
        Case("end_id outside the vocabulary", "any", lambda c: _raw_sampling(c, end_id=HUGE)),
        Case("pad_id outside the vocabulary", "any", lambda c: _raw_sampling(c, pad_id=HUGE)),
        Case("max_tokens of the wrong shape (gRPC)", "error", _wrong_shape, needs_grpc=True),
        Case(
            "max_tokens of the wrong data type (gRPC)",
            "error",
            lambda c: _wrong_dtype(c, "max_tokens", 4.0, "TYPE_FP32"),
            needs_grpc=True,
        ),
        Case(
            "text_input of the wrong data type (gRPC)",
            "error",
            lambda c: _wrong_dtype(c, "text_input", [1, 2], "TYPE_INT32"),
            needs_grpc=True,
        ),
        Case("request batch above max_batch_size (gRPC)", "error", _batch_too_large, needs_grpc=True),
        Case("client cancels mid-stream (gRPC)", "any", _cancel_grpc, needs_grpc=True),
        Case("client disconnects mid-stream (HTTP)", "any", _cancel_http),
    ]


# --- the llm-api contract ---------------------------------------------------------------------------------------


def _too_many_tokens(ctx: SuiteContext) -> str:
    """More single-character words than the LLM's max_num_tokens (the build section's, or its 8192 default)."""
    n = (ctx.recipe.build.max_num_tokens or DEFAULT_MAX_NUM_TOKENS) + 16
    return " ".join("abcdefghijklmnopqrstuvwxyz"[i % 26] for i in range(n))


def _stop_request(ctx: SuiteContext, request_id: str | None) -> Generation:
    """A `stop: true` request (tensorrtllm_backend README.md@0b9d7d5): text_input "" and the id to cancel."""
    body = {"text_input": "", "stop": True}
    if request_id is not None:
        body["id"] = request_id
    return _raw(ctx, body)


STOP_TRIES = 3


def _stop_running(ctx: SuiteContext) -> Generation:
    """Start a long gRPC stream with a request id, then send `stop` with that id over HTTP: the stream must end
    (CANCELLED or final) before its max_tokens, and the stop request itself is answered.

    A small model may finish the whole stream before the stop reaches it (a busy machine delays the stop request):
    a stream that reached max_tokens only counts against the server when its last response came after the stop
    was answered; one that ended first is tried again, up to STOP_TRIES times, and said so when it never raced."""
    for _ in range(STOP_TRIES):
        gen, stop, ended_first = _stop_one_stream(ctx)
        if stop is None or not ended_first:
            return gen if stop is None else _judge_stop(ctx, gen, stop)
    if stop.error is None:
        return _judge_stop(ctx, gen, stop)
    gen.error, gen.final = None, True
    gen.note = f"not judged: the stream ended before the stop request was answered ({STOP_TRIES} tries)"
    return gen


def _stop_one_stream(ctx: SuiteContext) -> tuple[Generation, Generation | None, bool]:
    """(the stream, the stop request's answer or None when it was never sent, whether the stream reached its
    max_tokens before the stop was answered)."""
    dep, rid = ctx.target, new_request_id("stop")
    max_tokens = ctx.recipe.build.max_seq_len // 2
    values = dep.contract.inputs(ctx.greedy_params(max_tokens=max_tokens), ctx.prompts[0].text, stream=True)
    session = dep.grpc()
    result: dict = {}
    sent = threading.Event()

    def stream() -> None:
        result["gen"] = session.generate(
            dep.model, dep.signature, values, request_id=rid, stop_after=None, on_first=sent.set
        )

    worker = threading.Thread(target=stream, daemon=True)
    worker.start()
    if not sent.wait(timeout=dep.timeout_s):
        worker.join(timeout=dep.timeout_s)
        return (
            result.get("gen") or Generation("grpc-stream", 0.0, error="no final response: no first response"),
            None,
            False,
        )
    stop = _stop_request(ctx, rid)
    answered = time.perf_counter()  # the clock of Generation.end
    worker.join(timeout=dep.timeout_s)
    gen = result.get("gen")
    if gen is None:
        return Generation("grpc-stream", 0.0, error="no final response after the stop request"), None, False
    dep.drop_grpc()
    full = gen.ok and gen.final and (ctx.count_tokens(gen) or 0) >= max_tokens
    return gen, stop, full and gen.end <= answered


def _judge_stop(ctx: SuiteContext, gen: Generation, stop: Generation) -> Generation:
    if stop.error is None:
        gen.error = "the stop request was accepted as a generation (it must be answered with CANCELLED)"
    elif gen.ok and gen.final and (ctx.count_tokens(gen) or 0) >= ctx.recipe.build.max_seq_len // 2:
        gen.error = "no final response: the stop request was answered but the stream went on to max_tokens"
    elif not gen.ok and "cancel" in (gen.error or "").lower():
        gen.error, gen.final = None, True  # ended by the stop: the outcome this case wants
    return gen


def llmapi_cases(ctx: SuiteContext) -> list[Case]:
    first = ctx.prompts[0].text
    return [
        Case("empty prompt", "any", lambda c: c.target.generate("", _params(c))),
        Case("prompt longer than max_input_len", "any", lambda c: c.target.generate(_too_long(c), _params(c))),
        Case(
            "prompt longer than max_num_tokens", "error", lambda c: c.target.generate(_too_many_tokens(c), _params(c))
        ),
        Case("max_tokens 0", "any", lambda c: c.target.generate(first, _params(c, max_tokens=0))),
        Case("max_tokens negative", "error", lambda c: c.target.generate(first, _params(c, max_tokens=-5))),
        Case("max_tokens huge", "any", lambda c: c.target.generate(first, _params(c, max_tokens=HUGE))),
        Case(
            "max_tokens of the wrong type",
            "error",
            lambda c: _raw(c, {"text_input": first, "sampling_param_max_tokens": "ten"}),
        ),
        Case(
            "temperature of the wrong type",
            "error",
            lambda c: _raw(
                c, {"text_input": first, "sampling_param_max_tokens": 4, "sampling_param_temperature": "hot"}
            ),
        ),
        Case(
            "temperature negative",
            "error",
            lambda c: _raw(
                c, {"text_input": first, "sampling_param_max_tokens": 4, "sampling_param_temperature": -1.0}
            ),
        ),
        Case(
            "unknown field (HTTP generate)",
            "any",
            lambda c: _raw(
                c, {"text_input": first, "sampling_param_max_tokens": 4, "sampling_param_top_k": 1, "no_such_field": 1}
            ),
        ),
        Case("stop request without a request id", "error", lambda c: _stop_request(c, None)),
        Case("stop request for an unknown request id", "error", lambda c: _stop_request(c, "no-such-request")),
        Case(
            "invalid UTF-8 prompt (gRPC)",
            "any",
            lambda c: _grpc(
                c, {"text_input": b"def f(\xff\xfe\xfd):\n", "sampling_param_max_tokens": 4, "sampling_param_top_k": 1}
            ),
            needs_grpc=True,
        ),
        Case(
            "unknown input tensor (gRPC)",
            "error",
            lambda c: _grpc(c, {"text_input": first, "sampling_param_max_tokens": 4, "no_such_input": 1}),
            needs_grpc=True,
        ),
        # TensorRT-LLM's SamplingParams checks (as the CPU rehearsal has them, reference/llmapi_contract.py):
        # temperature >= 0 (NaN fails it, infinity passes), 0 <= top_p <= 1, top_k >= 0; max_tokens defaults to 32
        Case(
            "temperature NaN (gRPC)",
            "error",
            lambda c: _grpc_sampling(c, sampling_param_temperature=math.nan),
            needs_grpc=True,
        ),
        Case(
            "temperature infinite (gRPC)",
            "any",
            lambda c: _grpc_sampling(c, sampling_param_temperature=math.inf),
            needs_grpc=True,
        ),
        Case(
            "top_p above 1",
            "error",
            lambda c: _raw_sampling(c, sampling_param_top_p=2.0, sampling_param_temperature=1.0),
        ),
        Case(
            "top_k negative",
            "error",
            lambda c: _raw_sampling(c, sampling_param_top_k=-1, sampling_param_temperature=1.0),
        ),
        Case(
            "top_k huge", "any", lambda c: _raw_sampling(c, sampling_param_top_k=HUGE, sampling_param_temperature=1.0)
        ),
        Case("max_tokens missing", "any", lambda c: _raw(c, {"text_input": first})),
        Case("max_tokens of the wrong shape (gRPC)", "error", _wrong_shape, needs_grpc=True),
        Case(
            "max_tokens of the wrong data type (gRPC)",
            "error",
            lambda c: _wrong_dtype(c, "sampling_param_max_tokens", 4.0, "TYPE_FP32"),
            needs_grpc=True,
        ),
        Case(
            "text_input of the wrong data type (gRPC)",
            "error",
            lambda c: _wrong_dtype(c, "text_input", [1, 2], "TYPE_INT32"),
            needs_grpc=True,
        ),
        Case("text_input of the wrong shape (gRPC)", "error", _batch_too_large, needs_grpc=True),
        Case("stop + request id cancels a running stream (gRPC)", "any", _stop_running, needs_grpc=True),
        Case("client cancels mid-stream (gRPC)", "any", _cancel_grpc, needs_grpc=True),
        Case("client disconnects mid-stream (HTTP)", "any", _cancel_http),
    ]


CASES = {"engine": engine_cases, "llm-api": llmapi_cases}
ENDED_BY_CLIENT = (_cancel_grpc, _cancel_http, _stop_running)


def cases(ctx: SuiteContext) -> list[Case]:
    return CASES[ctx.target.contract.name](ctx)


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
        if case.ended_by_client and gen.ok:
            outcome = gen.note or f"cancelled by the client after {len(gen.chunks)} response(s)"
        row = {
            "case": case.name,
            "expect": case.expect,
            "outcome": outcome,
            "message": gen.error or "",
            "tokens": gen.num_tokens if gen.ok else None,
        }
        if not _clean(gen):
            problems.append(f"{case.name}: no clean answer ({gen.error})")
        elif case.expect == "error" and gen.ok:
            problems.append(f"{case.name}: accepted ({gen.num_tokens} tokens) but must be refused")
        limit = ctx.recipe.build.max_seq_len
        n = ctx.count_tokens(gen) if gen.ok else None
        if case.name == "max_tokens huge" and n is not None and n > limit:
            problems.append(f"{case.name}: {n} tokens > max_seq_len {limit}")
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
    return CheckResult(
        NAME, TITLE, PASSED, f"{ran} cases answered cleanly; the server stayed healthy after each", details
    )
