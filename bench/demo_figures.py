"""The README's demo figures: `specbuild compile recipes/demo.yaml` run N times from nothing (fresh output folders,
--no-cache), each run's report.json read back, and the median of each figure over the runs, with the CPU that ran
them (model and the SIMD flags the reference runtime's matmul calibration measures on) and the load average.
Prints JSON; nothing asserts on speed.

    PYTHONPATH=pipeline python bench/demo_figures.py --runs 3 --out bench/results/demo-figures.json

The runs are sequential: each compile serves and measures its speculative and baseline deployments side by side
(ABBA rounds), so a speedup is a ratio taken within one run; the median over runs is what the README quotes.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_setup import emit  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SIMD = ("avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16", "fma")


def cpu() -> dict:
    """The CPU model and its SIMD flags (/proc/cpuinfo), and how many CPUs this process may use."""
    model, flags = platform.processor(), set()
    info = Path("/proc/cpuinfo")
    if info.exists():
        for line in info.read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                model = value.strip()
            elif key.strip() == "flags":
                flags = set(value.split())
    return {"model": model, "simd": [f for f in SIMD if f in flags], "cpus": len(os.sched_getaffinity(0))}


def figures(report: dict) -> dict:
    """The README's table, read from one report.json."""
    checks = {c["name"]: c for c in report["checks"]}
    acceptance = checks["acceptance"]["details"]
    overall = acceptance["overall"]
    categories = [g["acceptance_length"]["value"] for g in acceptance["by_category"]]
    speedup = {str(level["concurrency"]): level for level in checks["performance"]["details"]["speedup"]}
    levels = checks["performance"]["details"]["levels"]
    one = {run["deployment"]: run for run in levels["speculative"] + levels["baseline"] if run["concurrency"] == 1}
    cost = next(level for level in checks["cost_model"]["details"]["levels"] if level["concurrency"] == 1)
    lossless = checks["lossless"]
    load = checks["load"]["details"]
    return {
        "lossless": lossless["status"],
        "lossless_summary": lossless["summary"],
        "al": overall["acceptance_length"]["value"],
        "al_low": overall["acceptance_length"]["low"],
        "al_high": overall["acceptance_length"]["high"],
        "acceptance_rate": overall["acceptance_rate"]["value"],
        "al_by_category_min": min(categories),
        "al_by_category_max": max(categories),
        "per_position": acceptance.get("per_position"),
        "speedup": {level: s["speedup"] for level, s in speedup.items()},
        "tokens_per_s_c1": {
            "speculative": speedup["1"]["speculative_tokens_per_s"],
            "baseline": speedup["1"]["baseline_tokens_per_s"],
        },
        "itl_p50_ms_c1": {name: run["itl_s"]["p50"] * 1000 for name, run in one.items()},
        "cost_model_c1": {
            "limit": cost["limit"],
            "in_process": cost["in_process"],
            "served": cost["served"],
            "served_share_of_limit": cost["served_share_of_limit"],
        },
        "bad_input_cases": len(checks["bad_input"]["details"]["cases"]),
        "bad_input": checks["bad_input"]["status"],
        "load": {"sent": load["sent"], "answered": load["answered"]},
        "passed": report["passed"],
    }


def median_of(runs: list[dict]) -> dict:
    """The median of every number the runs share (nested one level), the rest from the first run."""
    out: dict = {}
    for key, first in runs[0].items():
        if isinstance(first, bool) or not isinstance(first, (int, float, dict)):
            out[key] = first if all(r[key] == first for r in runs) else [r[key] for r in runs]
        elif isinstance(first, dict):
            out[key] = {
                k: statistics.median(r[key][k] for r in runs)
                for k in first
                if all(isinstance(r[key].get(k), (int, float)) for r in runs)
            }
        else:
            out[key] = statistics.median(r[key] for r in runs)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--recipe", type=Path, default=ROOT / "recipes" / "demo.yaml")
    parser.add_argument("--work", type=Path, default=ROOT / ".cache" / "demo-figures")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    specbuild = Path(sys.executable).with_name("specbuild")
    runs, walls, loads = [], [], []
    for i in range(args.runs):
        work = args.work / f"run{i}"
        folders = {
            "--engines-dir": work / "engines",
            "--repo-dir": work / "triton_repo",
            "--report-dir": work / "reports",
        }
        loads.append(os.getloadavg()[0])
        started = time.monotonic()
        command = [str(specbuild), "compile", str(args.recipe), "--no-cache"]
        for flag, folder in folders.items():
            command += [flag, str(folder)]
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
        walls.append(time.monotonic() - started)
        print(f"run {i + 1}/{args.runs}: exit {done.returncode} in {walls[-1]:.0f} s", file=sys.stderr)
        report = next((work / "reports").glob("*/report.json"), None)
        if report is None:
            sys.exit(
                f"run {i + 1}: no report.json under {work / 'reports'} (exit {done.returncode}):\n{done.stdout[-3000:]}"
            )
        runs.append(figures(json.loads(report.read_text())))
    emit(
        {
            "recipe": str(args.recipe.relative_to(ROOT)),
            "cpu": cpu(),
            "runs": len(runs),
            "wall_s": walls,
            "load_average_at_start": loads,
            "median": median_of(runs),
            "each": runs,
        },
        args.out,
    )


if __name__ == "__main__":
    main()
