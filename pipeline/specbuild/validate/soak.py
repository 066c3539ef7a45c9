"""One soak of a served deployment (bench/soak.py, tests/validate/test_soak_reference.py): the request mix of
validate/mix.py with a fixed number of good requests, on a suite context of its own."""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from specbuild.validate.context import close_context, make_context
from specbuild.validate.endpoints import Endpoints
from specbuild.validate.mix import MixPlan, MixResult, mix_models, run_mix

if TYPE_CHECKING:
    from specbuild.validate.local_server import LocalServer


def soak(
    build,
    http: str,
    grpc: str | None,
    *,
    concurrency: int,
    requests: int,
    server: "LocalServer | None",
    max_tokens: Sequence[int] | None = None,
    prompts: int = 3,
    seed: int = 0,
    progress=None,
) -> MixResult:
    """One soak: the mix (every model clients call, every protocol, every bad case) with a fixed number of good
    requests, against the deployment of `build` (specbuild.runtimes.build) served at http/grpc (host:port)."""
    ctx = make_context(build, Endpoints(http, grpc), progress=progress)
    try:
        plan = MixPlan.default(ctx, mix_models(ctx), prompts=prompts, max_tokens=max_tokens, seed=seed)
        return run_mix(ctx, plan, concurrency=concurrency, requests=requests, server=server)
    finally:
        close_context(ctx)
