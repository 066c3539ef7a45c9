"""Back-to-back soaks of one served llm-api repository (default: recipes/reference/llmapi_draft_target.yaml, the
reference core of NVIDIA's llmapi `tensorrt_llm` model): one tritonserver serves every round, each round sends the
request mix of `specbuild.validate.mix` for `--seconds` from `--concurrency` clients, with `--bad-share` of the
requests bad (every bad-input case of the llm-api contract, or only those of `--kinds`), and after each round, once
the server has gone idle, the resident memory of the server and of each python stub is read from procfs. Prints one JSON document; `levels_off`
says whether the last three rounds' total RSS lie within 5% of each other (the plateau). Not a test: the suite
guards the cause with a bounded count (tests/reference/test_llmapi_served_core.py).

    PYTHONPATH=pipeline python bench/soak_llmapi.py --rounds 6 --seconds 45 --concurrency 16 \\
        --out bench/results/soak-llmapi-draft-target.json
    PYTHONPATH=pipeline python bench/soak_llmapi.py --kinds answered   # good requests + the bad kinds answered
    PYTHONPATH=pipeline python bench/soak_llmapi.py --kinds good       # good requests only

--kinds: all (default), good, answered (only the bad cases the reference core answers rather than refuses: empty
prompt, unknown field, huge top_k, max_tokens missing, the cancellations), or a comma-separated list of bad case
names (substrings). The build folder is temporary unless --work is given.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "pipeline"))
sys.path.insert(0, str(ROOT / "bench"))

from soak import soak_recipe  # noqa: E402 (bench/soak.py: the recipe with the soak's max_tokens and timeout)

RECIPE = ROOT / "recipes" / "reference" / "llmapi_draft_target.yaml"
# bad cases the reference llm-api core answers (a generation runs) rather than refuses at the door
ANSWERED = ("empty prompt", "unknown field", "top_k huge", "max_tokens missing", "cancels", "disconnects")
PLATEAU_ROUNDS, PLATEAU_SPREAD = 3, 0.05


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def build(recipe, root: Path) -> Path:
    from specbuild.plan import Layout
    from specbuild.runtimes.build import resolve_build

    resolved = resolve_build(recipe)
    layout = Layout(root / "engines", root / "triton_repo", root / "reports", recipe.name)
    return resolved.runtime.write_repository(recipe, resolved.spec, layout, "target")


def select_bad(bad: list, kinds: str) -> list:
    if kinds == "all":
        return bad
    if kinds == "good":
        return []
    names = ANSWERED if kinds == "answered" else tuple(k.strip() for k in kinds.split(",") if k.strip())
    return [b for b in bad if any(n in b.case.name for n in names)]


def memory(server) -> dict:
    """RSS (MiB) of tritonserver, each stub, and their total."""
    from specbuild.validate.local_server import rss_bytes_of

    mib = 2**20
    stubs = {name: rss_bytes_of(pid) for name, pid in sorted(server.stubs().items())}
    own = rss_bytes_of(server.pid)
    total = server.rss_bytes()
    return {
        "tritonserver_mib": round((own or 0) / mib, 1),
        "stubs_mib": {n: round((v or 0) / mib, 1) for n, v in stubs.items()},
        "total_mib": round((total or 0) / mib, 1),
    }


IDLE_CPU_S = 0.05  # CPU seconds per IDLE_SAMPLE_S below which the server counts as idle
IDLE_SAMPLE_S, IDLE_SAMPLES = 0.5, 4
AFTER_IDLE_S = (
    2.0  # the core gives freed heap pages back once idle for 1 s (reference/core_models/llm_api/model.py IDLE_TRIM_S)
)


def settle(server, limit_s: float) -> float:
    """Wait until tritonserver and its stubs use no CPU for IDLE_SAMPLES samples in a row (what the round left
    running has finished), then AFTER_IDLE_S more; returns the seconds it took (limit_s at most)."""
    start = time.monotonic()
    quiet, last = 0, server.cpu_seconds()
    while quiet < IDLE_SAMPLES and time.monotonic() - start < limit_s:
        time.sleep(IDLE_SAMPLE_S)
        now = server.cpu_seconds()
        quiet = quiet + 1 if now - last < IDLE_CPU_S else 0
        last = now
    time.sleep(AFTER_IDLE_S)
    return round(time.monotonic() - start, 1)


def levels_off(totals: list[float]) -> dict:
    last = totals[-PLATEAU_ROUNDS:]
    if len(last) < PLATEAU_ROUNDS or not min(last):
        return {"last_rounds_mib": last, "spread": None, "levels_off": False}
    spread = max(last) / min(last) - 1.0
    return {"last_rounds_mib": last, "spread": round(spread, 4), "levels_off": spread <= PLATEAU_SPREAD}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--recipe", type=Path, default=RECIPE)
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--seconds", type=float, default=45.0, help="length of each round")
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--bad-share", type=float, default=0.3, help="share of bad requests in the mix")
    p.add_argument("--kinds", default="all", help="all | good | answered | comma-separated bad case names")
    p.add_argument("--max-tokens", type=int, default=16, help="the longer of the two lengths (the other is 1/4)")
    p.add_argument(
        "--settle",
        type=float,
        default=60.0,
        help="at most this many seconds for the server to go idle after a round before its RSS is read",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--work", type=Path, default=None, help="build folder (default: a temporary one)")
    p.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    args = p.parse_args(argv)
    if not 0.0 <= args.bad_share < 1.0:
        p.error("--bad-share must be in [0, 1)")

    from specbuild.runtimes.build import resolve_build
    from specbuild.serve import TritonServer
    from specbuild.validate.context import close_context, make_context
    from specbuild.validate.endpoints import Endpoints
    from specbuild.validate.local_server import LocalServer
    from specbuild.validate.mix import MixPlan, mix_models, run_mix, single_answers

    with tempfile.TemporaryDirectory(prefix="specbuild-soak-llmapi-") as tmp:
        work = args.work or Path(tmp)
        recipe = soak_recipe(args.recipe, args.max_tokens)
        repo = build(recipe, work)
        server = TritonServer(repo, log_path=work / "tritonserver.log")
        t = time.perf_counter()
        server.start()
        log(f"server ready in {time.perf_counter() - t:.1f} s")
        out = {
            "recipe": str(args.recipe.relative_to(ROOT) if args.recipe.is_relative_to(ROOT) else args.recipe),
            "rounds": args.rounds,
            "seconds": args.seconds,
            "concurrency": args.concurrency,
            "bad_share": args.bad_share,
            "kinds": args.kinds,
            "max_tokens": args.max_tokens,
            "runs": [],
        }
        try:
            local = LocalServer(server.pid)
            out["after_start"] = memory(local)
            ctx = make_context(resolve_build(recipe), Endpoints(server.http_address, server.grpc_url))
            try:
                plan = MixPlan.default(
                    ctx,
                    mix_models(ctx),
                    prompts=3,
                    max_tokens=(max(1, args.max_tokens // 4), args.max_tokens),
                    seed=args.seed,
                )
                plan.bad = select_bad(plan.bad, args.kinds)
                good = (
                    len(plan.good)
                    if not plan.bad or not args.bad_share
                    else max(1, round(len(plan.bad) * (1 - args.bad_share) / args.bad_share))
                )
                expected = single_answers(ctx, {m: ctx.for_model(m).target for m in mix_models(ctx)}, plan.good)
                for i in range(args.rounds):
                    plan.seed = args.seed + i
                    result = run_mix(
                        ctx,
                        OnePass(plan, good),
                        concurrency=args.concurrency,
                        seconds=args.seconds,
                        server=local,
                        expected=expected,
                    )
                    d = result.to_dict()
                    at_end = memory(local)
                    idle_after = settle(local, args.settle)  # what the round left running finishes first
                    run = {
                        "round": i + 1,
                        "wall_s": d["wall_s"],
                        "sent": d["sent"],
                        "good": d["good"],
                        "bad": d["bad"],
                        "lost": d["lost"],
                        "problems": d["problems"],
                        "memory_at_end": at_end,
                        "memory": memory(local),
                        "idle_after_s": idle_after,
                        "alive": local.alive(),
                        "stubs_died": (d["server"] or {}).get("stubs_died", []),
                    }
                    out["runs"].append(run)
                    log(
                        f"round {i + 1}: {d['sent']} sent in {d['wall_s']:.1f} s, lost {d['lost']}, "
                        f"bad {d['bad']}, total RSS {run['memory']['total_mib']} MiB "
                        f"(stubs {run['memory']['stubs_mib']})"
                    )
                    if not run["alive"] or run["stubs_died"]:
                        break
            finally:
                close_context(ctx)
        finally:
            server.stop()
        totals = [r["memory"]["total_mib"] for r in out["runs"]]
        out["total_mib"] = [out["after_start"]["total_mib"]] + totals
        out["plateau"] = levels_off(totals)
        out["totals"] = {
            "sent": sum(r["sent"] for r in out["runs"]),
            "lost": sum(r["lost"] for r in out["runs"]),
            "bad_sent": sum(r["bad"]["sent"] for r in out["runs"]),
            "accepted_bad": sum(r["bad"]["accepted"] for r in out["runs"]),
            "problems": sum(len(r["problems"]) for r in out["runs"]),
        }
        text = json.dumps(out, indent=2)
        print(text)
        if args.out:
            args.out.write_text(text + "\n")
    return 0


class OnePass:
    """The plan with a pass of `good` good jobs and every bad one spread through them (run_mix cycles the pass for
    the round's seconds; the plan's own default pass has at least three good jobs per bad one)."""

    def __init__(self, plan, good: int):
        self.plan, self.count = plan, good
        self.good, self.bad, self.seed = plan.good, plan.bad, plan.seed

    def jobs(self, good_requests):
        return self.plan.jobs(self.count)


if __name__ == "__main__":
    raise SystemExit(main())
