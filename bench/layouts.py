"""The lean forward's two float32 matmul layouts side by side (pipeline/specbuild/reference/decoder/lean/linear.py):
`packed` (oneDNN-packed copies for multi-row and lm-head matmuls) and `column-major` (weights stored transposed for
MKL). Prints JSON.

    PYTHONPATH=pipeline python bench/layouts.py                                  # c = 1, the main methods
    PYTHONPATH=pipeline python bench/layouts.py --concurrency 16 --rounds 8 --methods autoregressive,draft_target

The same engines are loaded once per layout (SPECBUILD_REFERENCE_MATMUL set before each load) into one process, and
every round runs each (layout, method) pair over the same prompts in an order that rotates from prompt to prompt (at
c = 1) or from round to round (batched), so the machine's load hits both layouts alike. Reported per method: the
median over rounds of packed time / column-major time (> 1: column-major is faster), the per-round ratios, each
layout's speedup of every method over its own autoregressive loop, and whether both layouts' greedy outputs agree.
Nothing asserts on speed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_setup import REPO, build_engines, emit, load_prompts, logger, machine, method_specs, profile_dir  # noqa: E402
from measure import executor, run_ours  # noqa: E402

LAYOUTS = ("packed", "column-major")


log = logger("layouts")


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", default="tiny")
    ap.add_argument("--methods", default="autoregressive,draft_target,prompt_lookup,medusa,eagle1")
    ap.add_argument("--concurrency", type=int, default=1, help="in-flight batch size")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--prompts", type=int, default=8, help="prompts per round (x2 per batch when batched)")
    ap.add_argument("--prompt-len", type=int, default=96)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--out", help="also write the JSON here")
    return ap.parse_args(argv)


def main(argv=None) -> dict:
    import torch

    from specbuild.reference.decoder.lean import linear

    args = parse_args(argv)
    torch.set_num_threads(1)
    methods = ["autoregressive", *[m for m in args.methods.split(",") if m and m != "autoregressive"]]
    profile = profile_dir(args.profile, progress=log)
    prompts = load_prompts(profile, max(args.prompts, args.concurrency), args.prompt_len)[
        : max(args.prompts, args.concurrency)
    ]
    specs = [s for s in method_specs(profile, 4) if s.label in methods]
    limits = dict(
        max_batch_size=max(1, args.concurrency),
        max_input_len=args.prompt_len,
        max_seq_len=args.prompt_len + args.new_tokens,
        max_num_tokens=8192,
    )
    before = os.environ.get(linear.MATMUL_ENV)
    runs: dict[tuple[str, str], tuple] = {}
    with tempfile.TemporaryDirectory(
        prefix="bench-layouts-", dir=REPO / ".cache" if (REPO / ".cache").is_dir() else None
    ) as tmp:
        for layout in LAYOUTS:
            os.environ[linear.MATMUL_ENV] = layout
            linear.float32_kernel.cache_clear()
            engines = build_engines(specs, profile, Path(tmp) / layout, limits)
            for s in specs:
                ex = executor(engines[s.label], args.concurrency, engines["draft"] if s.needs_draft else None, s.method)
                runs[(layout, s.label)] = (ex, engines[s.label])
        if before is None:
            os.environ.pop(linear.MATMUL_ENV, None)
        else:
            os.environ[linear.MATMUL_ENV] = before
        linear.float32_kernel.cache_clear()
        for ex, engine in runs.values():  # warm-up
            run_ours(ex, engine, prompts[:1], 4)

        keys = list(runs)
        seconds: dict[tuple[str, str], list[float]] = {k: [] for k in keys}
        outputs: dict[tuple[str, str], list] = {k: [] for k in keys}
        for round_ in range(args.rounds):
            total = dict.fromkeys(keys, 0.0)
            if args.concurrency == 1:
                for i, prompt in enumerate(prompts):
                    shift = (i + round_) % len(keys)
                    for key in keys[shift:] + keys[:shift]:
                        run = run_ours(*runs[key], [prompt], args.new_tokens)
                        total[key] += run.seconds
                        outputs[key] += run.outputs
            else:
                for key in keys if round_ % 2 == 0 else keys[::-1]:
                    run = run_ours(*runs[key], prompts * 2, args.new_tokens)
                    total[key] += run.seconds
                    outputs[key] += run.outputs
            for key in keys:
                seconds[key].append(total[key])
            log(
                f"round {round_ + 1}: "
                + ", ".join(f"{m} {seconds[('packed', m)][-1] / seconds[('column-major', m)][-1]:.3f}" for m in methods)
            )

    report: dict = {
        "machine": machine(),
        "profile": args.profile,
        "settings": {
            "concurrency": args.concurrency,
            "rounds": args.rounds,
            "prompts": len(prompts),
            "prompt_len": args.prompt_len,
            "new_tokens": args.new_tokens,
            "threads": 1,
        },
        "column_major_speed_over_packed": {},
        "speedup_vs_autoregressive": {},
    }
    for m in methods:
        ratios = [p / c for p, c in zip(seconds[("packed", m)], seconds[("column-major", m)])]
        report["column_major_speed_over_packed"][m] = {
            "median": round(statistics.median(ratios), 3),
            "rounds": [round(r, 3) for r in ratios],
        }
    for layout in LAYOUTS:
        base = seconds[(layout, "autoregressive")]
        report["speedup_vs_autoregressive"][layout] = {
            m: round(statistics.median(b / s for b, s in zip(base, seconds[(layout, m)])), 3) for m in methods
        }
    report["outputs_identical_across_layouts"] = {
        m: outputs[("packed", m)] == outputs[("column-major", m)] for m in methods
    }
    emit(report, args.out)
    return report


if __name__ == "__main__":
    main()
