"""Repeated soaks of served reference repositories: the demo-like EAGLE deployment (ensemble and BLS) and the
draft-target one (its BLS and ensemble), each served by the real tritonserver, each hit `--runs` times by the request
mix of `specbuild.validate.mix` (good requests over HTTP, HTTP streaming and gRPC at several lengths, each compared
with its single-request greedy answer, amid every bad-input case) from `--concurrency` clients. Prints one JSON
document: per run what was sent, lost, unanswered, crossed, wrongly accepted, whether the server and its stubs
survived, RSS before/after; totals at the end. Not a test: it asserts nothing (the test suite has a short soak,
tests/validate/test_soak_reference.py).

    PYTHONPATH=pipeline python bench/soak.py --runs 4 --requests 200 --concurrency 32
    PYTHONPATH=pipeline python bench/soak.py --repos eagle --runs 10 --requests 400 --restart

A server keeps serving from run to run (so that RSS growth over runs shows); one that died, or whose stub died,
is restarted before the next run and counted in `crashed`. --restart starts a fresh server for every run.
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

RECIPES = {
    "eagle": ROOT / "recipes" / "demo.yaml",
    "draft_target": ROOT / "recipes" / "reference" / "draft_target.yaml",
}


def soak_recipe(path: Path, max_tokens: int):
    from specbuild.recipe.loader import load_recipe

    recipe = load_recipe(path)
    validation = recipe.validation.model_copy(update={"max_tokens": max_tokens, "request_timeout_s": 120.0})
    return recipe.model_copy(update={"validation": validation})


def build(recipe, root: Path) -> Path:
    from specbuild.compile import build_engines
    from specbuild.plan import Layout
    from specbuild.repository.engine.writer import write_repository
    from specbuild.runtimes.build import resolve_build

    resolved = resolve_build(recipe)
    layout = Layout(root / "engines", root / "triton_repo", root / "reports", recipe.name)
    build_engines(resolved, layout)
    return write_repository(recipe, resolved.spec, layout, flavour=resolved.runtime)


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def run_repo(name: str, recipe, repo: Path, args, work: Path) -> list[dict]:
    from specbuild.serve import TritonServer
    from specbuild.validate.local_server import LocalServer
    from specbuild.runtimes.build import resolve_build
    from specbuild.validate.soak import soak

    resolved = resolve_build(recipe)
    runs, server = [], None
    try:
        for i in range(args.runs):
            if server is None or args.restart or not server.running():
                if server is not None:
                    server.stop()
                server = TritonServer(repo, log_path=work / f"{name}-{i}.log")
                t = time.perf_counter()
                server.start()
                log(f"{name}: server ready in {time.perf_counter() - t:.1f} s")
            result = soak(
                resolved,
                server.http_address,
                server.grpc_url,
                concurrency=args.concurrency,
                requests=args.requests,
                server=LocalServer(server.pid),
                max_tokens=(max(1, args.max_tokens // 4), args.max_tokens),
                seed=args.seed + i,
            )
            d = result.to_dict()
            crashed = not d["server"]["alive"] or bool(d["server"]["stubs_died"])
            run = {
                "run": i + 1,
                "wall_s": d["wall_s"],
                "sent": d["sent"],
                "good": d["good"],
                "bad": d["bad"],
                "lost": d["lost"],
                "crashed": crashed,
                "unhealthy": bool(
                    d["health"].get("not_ready") or d["health"].get("follow_up_failed") or not d["health"].get("live")
                ),
                "server": d["server"],
                "problems": d["problems"],
                "examples": d["examples"],
            }
            runs.append(run)
            log(
                f"{name} run {i + 1}: {d['sent']} sent in {d['wall_s']:.1f} s, lost {d['lost']}, "
                f"no answer {d['good']['no answer'] + d['bad']['no answer']}, crashed {crashed}, "
                f"rss {d['server']['rss_growth'] if d['server'] else None}"
            )
            if crashed:
                server.stop()
                server = None
    finally:
        if server is not None:
            server.stop()
    return runs


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repos", default="eagle,draft_target", help="comma-separated: " + ", ".join(RECIPES))
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--requests", type=int, default=128, help="good requests per run (every bad case is added)")
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--max-tokens", type=int, default=16, help="the longer of the two lengths (the other is 1/4)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--restart", action="store_true", help="a fresh server for every run")
    p.add_argument("--work", type=Path, default=None, help="build folder (default: a temporary one)")
    p.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    args = p.parse_args(argv)
    names = [n.strip() for n in args.repos.split(",") if n.strip()]
    unknown = [n for n in names if n not in RECIPES]
    if unknown:
        p.error(f"unknown repos {unknown}: choose from {', '.join(RECIPES)}")
    with tempfile.TemporaryDirectory(prefix="specbuild-soak-") as tmp:
        work = args.work or Path(tmp)
        out = {
            "concurrency": args.concurrency,
            "requests_per_run": args.requests,
            "runs_per_repo": args.runs,
            "max_tokens": args.max_tokens,
            "restart": args.restart,
            "repos": {},
        }
        for name in names:
            recipe = soak_recipe(RECIPES[name], args.max_tokens)
            repo = build(recipe, work / name)
            out["repos"][name] = run_repo(name, recipe, repo, args, work)
        rows = [r for runs in out["repos"].values() for r in runs]
        growth = [r["server"]["rss_growth"] for r in rows if r["server"] and r["server"]["rss_growth"] is not None]
        out["totals"] = {
            "runs": len(rows),
            "sent": sum(r["sent"] for r in rows),
            "lost": sum(r["lost"] for r in rows),
            "no_answer": sum(r["good"]["no answer"] + r["bad"]["no answer"] for r in rows),
            "mixed": sum(r["good"]["mixed"] for r in rows),
            "diverged": sum(r["good"]["diverged"] for r in rows),
            "accepted_bad": sum(r["bad"]["accepted"] for r in rows),
            "crashed": sum(r["crashed"] for r in rows),
            "unhealthy": sum(r["unhealthy"] for r in rows),
            "rss_growth_max": max(growth) if growth else None,
            "rss_growth_per_repo": {
                n: [r["server"]["rss_growth"] for r in runs if r["server"]] for n, runs in out["repos"].items()
            },
        }
        text = json.dumps(out, indent=2)
        print(text)
        if args.out:
            args.out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
