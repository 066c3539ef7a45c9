"""Adapting the draft to traffic the shipped heads are weak on, end to end, from a clean checkout (bench/README.md,
"Adapting the draft"): prints one JSON document with the held-out acceptance per category before and after (the
`categories` and `overall` of adapt.json) and the served speedup at concurrency 1 before and after.

    PYTHONPATH=pipeline python bench/adapt.py [--work .cache/bench-adapt] [--per-category 75] [--max-steps N]

1. traffic: bench/adapt_traffic.py's generated categories (default: arithmetic worksheets, --per-category 150),
   out of the zoo's Python-stdlib domain: the one the shipped EAGLE head is weakest on;
2. before: `specbuild compile` of recipes/demo.yaml (the base zoo, EAGLE-1 chain of 5) validated on held-out records
   of that traffic (--served-per-category of each category's held-out part, the same split adapt makes), at
   concurrency 1;
3. after: the same recipe with an `adapt:` section: compile adapts the head first (default budget unless
   --max-steps / --max-minutes), then builds, serves and validates the head the gate chose, on the same prompts.

4. interleaved (--interleaved-rounds R, default 5): the served speedups of both heads measured again in the same
   rounds, after both compiles: the two speculative repositories and the baseline served side by side
   (bench/served.py's Served), each round sending the same held-out prompts (greedy, concurrency 1) to the three in
   an order that rotates, so that another process's load hits both heads alike; per round speedup = tokens/s of a
   head's deployment / tokens/s of the baseline in that round, median over the rounds. The two compiles' validate
   figures stand beside it: they run minutes apart, and a shared machine's load moves between them;
5. with --repeat-steps N: adapt twice more with max_steps N, once on the teacher outputs the run above cached and
   once from an empty build cache (the teacher pass regenerated), and compare the two heads' bytes (issue #38: the
   same inputs, seed and --max-steps give the same head, bitwise on a CPU).

Nothing is asserted: the JSON says what happened (`done_when` compares it with issue #38's figures).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "pipeline"))
sys.path.insert(0, str(ROOT / "bench"))

import adapt_traffic  # noqa: E402

from specbuild.adapt.split import split_traffic  # noqa: E402
from specbuild.adapt.traffic import Record, record_digest  # noqa: E402
from specbuild.recipe.adapt import AdaptSection  # noqa: E402


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def served_prompts(records: list[dict], per_category: int, seed: int) -> list[dict]:
    """The first `per_category` held-out records of each category, as adapt splits them (the zoo's tokenizer has no
    chat template, so each prompt is sent as it is and its digest is the record's)."""
    defaults = AdaptSection()
    recs = [Record(r["id"], r["category"], r["prompt"], (), record_digest(r["category"], r["prompt"])) for r in records]
    held = {r.id for r in split_traffic(recs, seed, defaults.held_out, defaults.dev).held_out}
    out, counts = [], {}
    for r in records:
        if r["id"] in held and counts.get(r["category"], 0) < per_category:
            counts[r["category"]] = counts.get(r["category"], 0) + 1
            out.append(r)
    return out


def recipe_text(name: str, prompts: Path, adapt: dict | None) -> str:
    from ruamel.yaml import YAML

    yaml = YAML(typ="rt")
    data = yaml.load((ROOT / "recipes" / "demo.yaml").read_text())
    data["name"] = name
    data["model"]["checkpoint"] = str(ROOT / "checkpoints" / "base" / "target")
    data["speculation"]["checkpoint"] = str(ROOT / "checkpoints" / "base" / "eagle")
    data["validation"]["prompts"] = str(prompts)
    data["validation"]["concurrency"] = [1]
    if adapt is not None:
        data["adapt"] = adapt
    import io

    buf = io.StringIO()
    yaml.dump(data, buf)
    return buf.getvalue()


def compile_recipe(recipe: Path, work: Path, log: Path) -> tuple[int, float]:
    start = time.monotonic()
    argv = [
        sys.executable,
        "-m",
        "specbuild.cli",
        "compile",
        str(recipe),
        "--engines-dir",
        str(work / "engines"),
        "--repo-dir",
        str(work / "triton_repo"),
        "--report-dir",
        str(work / "reports"),
        "--adapt-dir",
        str(work / "adapt"),
        "--cache-dir",
        str(work / "cache"),
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "pipeline")}
    with log.open("w") as f:
        code = subprocess.run(argv, stdout=f, stderr=subprocess.STDOUT, env=env, cwd=work).returncode
    return code, time.monotonic() - start


def speedup_at_1(report: Path) -> dict | None:
    data = json.loads((report / "report.json").read_text())
    for check in data["checks"]:
        for point in (check.get("details") or {}).get("speedup") or []:
            if point["concurrency"] == 1:
                return {k: point[k] for k in ("speedup", "speedup_min", "speedup_max", "rounds")}
    return None


def acceptance(report: Path) -> float | None:
    data = json.loads((report / "report.json").read_text())
    for check in data["checks"]:
        al = (check.get("details") or {}).get("mean_acceptance_length")
        if al is not None:
            return al
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", type=Path, default=ROOT / ".cache" / "bench-adapt")
    parser.add_argument(
        "--categories",
        default="arithmetic",
        help="traffic categories (bench/adapt_traffic.py: arithmetic, logs, yaml, hexdump); default the one the "
        "shipped EAGLE head is weakest on",
    )
    parser.add_argument("--per-category", type=int, default=150)
    parser.add_argument("--served-per-category", type=int, default=12)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-steps", type=int, default=None)
    parser.add_argument("--max-minutes", type=float, default=None)
    parser.add_argument("--skip-served", action="store_true", help="adapt only (no compile before/after)")
    parser.add_argument(
        "--measure-only",
        action="store_true",
        help="--work holds both compiles already (an earlier run): read their reports, then measure 4 and 5 only",
    )
    parser.add_argument("--interleaved-rounds", type=int, default=5, help="0: skip the interleaved comparison")
    parser.add_argument(
        "--repeat-steps",
        type=int,
        default=0,
        help="then adapt twice with this max_steps (cached and regenerated teacher outputs) and compare the heads",
    )
    args = parser.parse_args()
    work = args.work.absolute()
    work.mkdir(parents=True, exist_ok=True)
    categories = tuple(args.categories.split(","))
    records = adapt_traffic.records(args.per_category, 0, categories)
    traffic = work / "traffic.jsonl"
    traffic.write_text("".join(json.dumps(r) + "\n" for r in records))
    prompts = work / "served.jsonl"
    prompts.write_text(
        "".join(json.dumps(r) + "\n" for r in served_prompts(records, args.served_per_category, args.seed))
    )
    adapt = {"traffic": str(traffic), "seed": args.seed}
    if args.max_steps is not None:
        adapt["max_steps"] = args.max_steps
    if args.max_minutes is not None:
        adapt["max_minutes"] = args.max_minutes
    before_recipe, after_recipe = work / "demo-before.yaml", work / "demo-adapt.yaml"
    before_recipe.write_text(recipe_text("demo-before", prompts, None))
    after_recipe.write_text(recipe_text("demo-adapt", prompts, adapt))
    result: dict = {
        "machine": {"cpu": cpu_model(), "cpus": os.cpu_count(), "load_at_start": os.getloadavg()},
        "traffic": {"records": len(records), "categories": list(categories), "served": str(prompts)},
    }
    timings: dict[str, float] = {}
    served: dict[str, dict | None] = {}
    if not args.skip_served:
        if not args.measure_only:
            code, timings["compile_before_s"] = compile_recipe(before_recipe, work, work / "compile-before.log")
            result["compile_before_exit"] = code
        served["before"] = speedup_at_1(work / "reports" / "demo-before")
        result["served_acceptance_before"] = acceptance(work / "reports" / "demo-before")
        if not args.measure_only:
            code, timings["compile_after_s"] = compile_recipe(after_recipe, work, work / "compile-after.log")
            result["compile_after_exit"] = code
        served["after"] = speedup_at_1(work / "reports" / "demo-adapt")
        result["served_acceptance_after"] = acceptance(work / "reports" / "demo-adapt")
    else:
        from specbuild.adapt.run import AdaptOptions, run_adapt
        from specbuild.load import load_build

        start = time.monotonic()
        run_adapt(
            load_build(after_recipe),
            AdaptOptions(out=work / "adapt" / "demo-adapt", cache_dir=work / "cache"),
            progress=lambda m: print(f"[adapt] {m}", file=sys.stderr, flush=True),
        )
        timings["adapt_s"] = time.monotonic() - start
    a = json.loads((work / "adapt" / "demo-adapt" / "adapt.json").read_text())
    report = json.loads((work / "adapt" / "demo-adapt" / "report.json").read_text())
    result.update(
        shipped=a["shipped"],
        reason=a["reason"],
        categories=a["categories"],
        overall=a["overall"],
        served_speedup={k: (v or {}).get("speedup") for k, v in served.items()} if served else None,
        served_speedup_rounds=served or None,
        training=a.get("training"),
        adapt_timings_s=report.get("timings_s"),
        adapt_cpu_s=report.get("cpu_s"),
        timings_s={k: round(v, 1) for k, v in timings.items()},
        load_at_end=os.getloadavg(),
    )
    before, after = a["overall"]["before"]["al"], a["overall"]["after"]["al"]
    gains = {"held_out_al": round(after / before - 1, 4) if before else None}
    if served.get("before") and served.get("after"):
        gains["served_speedup_c1"] = round(served["after"]["speedup"] / served["before"]["speedup"] - 1, 4)
    result["done_when"] = {
        "gains": gains,
        "held_out_al_up_15pct": gains["held_out_al"] is not None and gains["held_out_al"] >= 0.15,
        "served_speedup_up_10pct": gains.get("served_speedup_c1") is not None and gains["served_speedup_c1"] >= 0.10,
        "adapt_minutes": round(sum((report.get("timings_s") or {}).values()) / 60, 1),
        "adapt_cpu_minutes": round(sum((report.get("cpu_s") or {}).values()) / 60, 1),
    }
    if not args.skip_served and args.interleaved_rounds:
        result["interleaved"] = interleaved(work, prompts, before_recipe, args.interleaved_rounds)
        # the interleaved gain is a ratio (after / before); done_when's gains are rises, as the others
        rise = round(result["interleaved"]["gain"] - 1, 4)
        result["done_when"]["gains"]["served_speedup_c1_interleaved"] = rise
        result["done_when"]["served_speedup_up_10pct_interleaved"] = rise >= 0.10
    if args.repeat_steps:
        result["repeat"] = repeat(after_recipe, work, args.repeat_steps)
    print(json.dumps(result, indent=2))


def interleaved(work: Path, prompts_file: Path, recipe: Path, rounds: int) -> dict:
    """Served speedup at concurrency 1 of the shipped head's and the adapted head's deployments, in the same rounds."""
    import contextlib
    import statistics

    import served as served_bench

    from specbuild.load import load_build

    build = load_build(recipe)
    max_tokens = build.recipe.validation.max_tokens
    texts = [json.loads(line)["prompt"] for line in prompts_file.read_text().splitlines() if line.strip()]
    repos = {
        "baseline": (work / "triton_repo" / "demo-before-baseline", "ensemble"),
        "before": (work / "triton_repo" / "demo-before", build.runtime.serving_model(build.spec)),
        "after": (work / "triton_repo" / "demo-adapt", build.runtime.serving_model(build.spec)),
    }
    names = list(repos)
    per_round: list[dict] = []
    with contextlib.ExitStack() as stack:
        servers = {
            name: stack.enter_context(served_bench.Served(repo, model, work / f"interleaved-{name}.log"))
            for name, (repo, model) in repos.items()
        }
        for name in names:  # one warm-up pass each
            servers[name].run(texts[:2], max_tokens, 1)
        for r in range(rounds):
            order = names[r % len(names) :] + names[: r % len(names)]
            tps = {}
            for name in order:
                tokens, seconds = servers[name].run(texts, max_tokens, 1)
                tps[name] = tokens / seconds
            per_round.append({"order": order, "tokens_per_s": {k: round(v, 2) for k, v in tps.items()}})
            print(f"[interleaved] round {r + 1}/{rounds}: {per_round[-1]}", file=sys.stderr, flush=True)
    speedups = {
        head: [rnd["tokens_per_s"][head] / rnd["tokens_per_s"]["baseline"] for rnd in per_round]
        for head in ("before", "after")
    }
    gains = [a / b for a, b in zip(speedups["after"], speedups["before"])]
    return {
        "rounds": per_round,
        "speedup": {k: round(statistics.median(v), 4) for k, v in speedups.items()},
        "speedup_min_max": {k: [round(min(v), 4), round(max(v), 4)] for k, v in speedups.items()},
        "gain": round(statistics.median(gains), 4),
        "gain_per_round": [round(g, 4) for g in gains],
        "prompts": len(texts),
        "max_tokens": max_tokens,
    }


def folder_digest(folder: Path) -> str | None:
    import hashlib

    if not folder.is_dir():
        return None
    h = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            h.update(path.relative_to(folder).as_posix().encode() + path.read_bytes())
    return h.hexdigest()


def repeat(recipe: Path, work: Path, steps: int) -> dict:
    """Adapt twice with max_steps `steps`: on the build cache the main run filled, and from an empty one."""
    import shutil

    from specbuild.adapt.run import AdaptOptions, run_adapt
    from specbuild.load import load_build

    runs = {}
    for name, cache in (("cached_teacher", work / "cache"), ("fresh_teacher", work / "cache-repeat")):
        if name == "fresh_teacher":
            shutil.rmtree(cache, ignore_errors=True)
        out = work / "adapt-repeat" / name
        start = time.monotonic()
        result = run_adapt(
            load_build(recipe),
            AdaptOptions(out=out, overrides={"max_steps": steps, "max_minutes": 600.0}, cache_dir=cache, reuse=True),
            progress=lambda m: print(f"[repeat {name}] {m}", file=sys.stderr, flush=True),
        )
        written = out / ("head" if result.shipped else "candidate")
        runs[name] = {
            "shipped": result.shipped,
            "steps": (result.adapt.get("training") or {}).get("steps"),
            "head_sha256": folder_digest(written),
            "seconds": round(time.monotonic() - start, 1),
        }
    digests = {r["head_sha256"] for r in runs.values()}
    return {"max_steps": steps, **runs, "identical": len(digests) == 1 and None not in digests}


if __name__ == "__main__":
    main()
