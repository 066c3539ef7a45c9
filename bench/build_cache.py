"""The time `compile` saves by reusing its steps (specbuild.cache.step_cache, specbuild.cache.step_store). Prints JSON.

    PYTHONPATH=pipeline python bench/build_cache.py                                  # recipes/demo.yaml, 3 rounds
    PYTHONPATH=pipeline python bench/build_cache.py --recipe tests/recipes/demo_tiny.yaml --out bench/results/x.json

Each round compiles the recipe with `--no-validate` (engines, repositories, bundle) into fresh folders with an
empty build cache, three ways, timing each `specbuild compile` process whole (start-up included):

    cold       nothing in place, nothing in the cache: every step runs (and its output is stored in the cache)
    unchanged  the same recipe again: every step's output is in place and reused
    no_cache   the same recipe with --no-cache: every step runs, nothing is stored (a compile without reuse)
    restored   the engine and repository folders deleted: each comes back from the build cache

Reported: per way the median wall time over rounds and every round's, the status and duration of each of its
steps in the last round (from `compile --json`), and the time a second compile of an unchanged recipe saves (no_cache - unchanged) and a restore
saves (no_cache - restored). On the reference runtime the engines are written from the checkpoints on the CPU, so
the saving here is that of writing them; on a GPU a TensorRT-LLM build is minutes to hours.
Nothing asserts on speed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_setup import REPO, emit, logger, machine

log = logger("build-cache")
WAYS = ("cold", "unchanged", "no_cache", "restored")


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--recipe", type=Path, default=REPO / "recipes" / "demo.yaml")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    return ap.parse_args(argv)


def compile_once(recipe: Path, root: Path, *extra: str) -> tuple[float, dict]:
    env = dict(os.environ, PYTHONPATH=str(REPO / "pipeline"), SPECBUILD_CACHE_DIR=str(root / "cache-root"))
    argv = [
        sys.executable,
        "-m",
        "specbuild.cli",
        "compile",
        str(recipe),
        "--no-validate",
        "--json",
        "--engines-dir",
        str(root / "engines"),
        "--repo-dir",
        str(root / "triton_repo"),
        "--report-dir",
        str(root / "reports"),
        "--cache-dir",
        str(root / "cache"),
        *extra,
    ]
    start = time.perf_counter()
    done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"compile failed ({done.returncode}):\n{done.stderr[-3000:]}")
    doc = json.loads(done.stdout)
    return wall, {
        s["name"].replace(str(root), "<tmp>"): {"status": s["status"], "duration_s": s["duration_s"]}
        for s in doc["steps"]
    }


def one_round(recipe: Path) -> dict[str, tuple[float, dict]]:
    with tempfile.TemporaryDirectory(prefix="specbuild-bench-cache-") as tmp:
        root = Path(tmp)
        out = {
            "cold": compile_once(recipe, root),
            "unchanged": compile_once(recipe, root),
            "no_cache": compile_once(recipe, root, "--no-cache"),
        }
        shutil.rmtree(root / "engines")
        shutil.rmtree(root / "triton_repo")
        out["restored"] = compile_once(recipe, root)
        return out


def main(argv=None) -> None:
    args = parse_args(argv)
    recipe = args.recipe.resolve()
    rounds = []
    for i in range(args.rounds):
        rounds.append(one_round(recipe))
        log(f"round {i + 1}/{args.rounds}: " + ", ".join(f"{w} {rounds[-1][w][0]:.2f} s" for w in WAYS))
    walls = {w: [round(r[w][0], 3) for r in rounds] for w in WAYS}
    median = {w: round(statistics.median(walls[w]), 3) for w in WAYS}
    emit(
        {
            "bench": "build_cache",
            "recipe": str(recipe.relative_to(REPO)) if recipe.is_relative_to(REPO) else str(recipe),
            "command": "specbuild compile RECIPE --no-validate (a fresh process each time)",
            "rounds": args.rounds,
            "machine": machine(),
            "wall_s": {w: {"median": median[w], "rounds": walls[w]} for w in WAYS},
            "steps": {w: rounds[-1][w][1] for w in WAYS},
            "saved_s": {
                "unchanged": round(median["no_cache"] - median["unchanged"], 3),
                "restored": round(median["no_cache"] - median["restored"], 3),
            },
        },
        args.out,
    )


if __name__ == "__main__":
    main()
