"""Load: `validation.load_clients` clients send the request mix of validate/mix.py for `validation.load_seconds`,
to a server on this machine only (loopback; skipped otherwise): greedy requests over HTTP generate, HTTP
generate_stream and the gRPC stream, to the serving model and its sibling (ensemble / BLS), at two lengths, each
compared with its own single-request greedy answer, amid every bad-input case. None may be lost or left
unanswered, none mixed between requests (an answer equal to another prompt's answer), no request that must be
refused answered; afterwards the server is live, every model ready, a normal request to each model succeeds and
(the server's process being on this machine) no python backend stub died. The RSS of the server and its stubs
before and after is reported. Answers that merely differ from their single-request answer ("diverged": batch shape
may change low-probability tokens, NVIDIA/TensorRT-LLM issue #2208) are a warning."""

from __future__ import annotations

from specbuild.validate.checks.base import FAILED, PASSED, SKIPPED, WARNED, CheckResult, SuiteContext, timed
from specbuild.validate.local_server import LocalServer
from specbuild.validate.mix import MixPlan, bad_outcomes, mix_models, run_mix

NAME, TITLE = "load", "Load (concurrent clients, good and bad requests, nothing lost or mixed)"


@timed
def run(ctx: SuiteContext) -> CheckResult:
    v = ctx.recipe.validation
    if not ctx.target.endpoints.loopback:
        return CheckResult(
            NAME,
            TITLE,
            SKIPPED,
            f"the load check runs only against a server on this machine (loopback), not {ctx.target.endpoints.http}",
        )
    clients = ctx.options.load_clients or v.load_clients
    seconds = ctx.options.load_seconds or v.load_seconds
    models = mix_models(ctx)
    plan = MixPlan.default(ctx, models, max_tokens=(max(1, ctx.max_tokens // 4), ctx.max_tokens))
    server = LocalServer.find(ctx.target.endpoints.http)
    ctx.progress(f"load: {clients} clients for {seconds:g} s", 0, 0)
    mix = run_mix(ctx, plan, concurrency=clients, seconds=seconds, server=server)
    g, b = mix.good, mix.bad
    details = {"clients": clients, "seconds": seconds, "models": models, **mix.to_dict()}
    summary = (
        f"{mix.answered}/{mix.sent} requests answered from {clients} clients in {mix.wall_s:.1f} s "
        f"({mix.requests_per_s:.1f} req/s): {g['equal']}/{g['sent']} good equal to their single-request "
        f"answer; {bad_outcomes(b)}"
    )
    if mix.server is not None and mix.server.get("rss_growth") is not None:
        summary += f"; server RSS {mix.server['rss_after_bytes'] / 2**20:.0f} MiB ({mix.server['rss_growth']:+.1%})"
    if mix.problems:
        return CheckResult(NAME, TITLE, FAILED, "; ".join(mix.problems[:3]) + "; " + summary, details)
    if g["diverged"]:
        return CheckResult(
            NAME,
            TITLE,
            WARNED,
            f"{g['diverged']} answers differ from the single-request greedy answer (batch-shape numerics?); " + summary,
            details,
        )
    return CheckResult(NAME, TITLE, PASSED, summary, details)
