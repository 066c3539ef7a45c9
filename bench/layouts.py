"""The lean forward's float32 matmul plans side by side (pipeline/specbuild/reference/decoder/lean/linear.py): the
`measured` plans (each weight shape's kernel per row count, measured on this CPU and cached:
lean/matmul_calibration.py) and the two fixed rules, `column-major` (weights stored transposed for MKL) and
`packed` (oneDNN-packed copies for calls of 3+ rows, down-projections row-major). Prints JSON.

    PYTHONPATH=pipeline python bench/layouts.py                                   # tiny zoo, c = 1
    PYTHONPATH=pipeline python bench/layouts.py --profile base --methods autoregressive,eagle1_chain5
    PYTHONPATH=pipeline python bench/layouts.py --concurrency 16 --rounds 8 --methods autoregressive,draft_target

The same engines are loaded once per rule (SPECBUILD_REFERENCE_MATMUL set before each load) into one process.
Reported:
- `calibration`: the measured plan of every weight shape the loads met (and the fixed rule it had to beat), the
  times behind it, and whether this run measured them (`--fresh-calibration`: into a temporary cache, as on a new
  machine) or read them from the cache;
- `per_call`: the target's one-token forward t(1) and a `--verify-width`-token forward t(W) (the shape of verifying
  a chain of W - 1 drafts) after a 96-token context, cache rolled back after each call, in rounds that time every
  rule and both widths back to back, the order rotating: medians over rounds, and the median per-round ratio
  t(W)/t(1) for each rule (how much more verifying W tokens costs than one decode step);
- per method, end to end: every round runs each (rule, method) pair over the same prompts in an order that rotates
  from prompt to prompt (at c = 1) or from round to round (batched), so the machine's load hits all rules alike;
  `speed_of_measured_over` a fixed rule: the median over rounds of that rule's time / the measured plans' time
  (> 1: the measured plans are faster); each rule's speedup of every method over its own autoregressive loop; and
  whether all rules' greedy outputs agree.
Nothing asserts on speed. `eagle1_chain5` is the demo's tree (recipes/demo.yaml: a chain of 5 drafts).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_setup import (  # noqa: E402
    REPO,
    MethodSpec,
    build_engines,
    emit,
    load_prompts,
    logger,
    machine,
    method_specs,
    profile_dir,
)
from measure import executor, run_ours  # noqa: E402

RULES = ("measured", "column-major", "packed")
CHAIN5 = [[0], [0, 0], [0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0, 0]]  # recipes/demo.yaml's eagle choices


log = logger("layouts")


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", default="tiny")
    ap.add_argument("--methods", default="autoregressive,draft_target,prompt_lookup,medusa,eagle1")
    ap.add_argument("--rules", default=",".join(RULES), help="measured and/or fixed rules, in this order")
    ap.add_argument("--concurrency", type=int, default=1, help="in-flight batch size")
    ap.add_argument("--rounds", type=int, default=5, help="end-to-end rounds (0: per-call costs only)")
    ap.add_argument("--prompts", type=int, default=8, help="prompts per round (x2 per batch when batched)")
    ap.add_argument("--prompt-len", type=int, default=96)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--verify-width", type=int, default=6, help="tokens of the verification forward in per_call")
    ap.add_argument("--per-call-rounds", type=int, default=15)
    ap.add_argument("--calls", type=int, default=10, help="forwards per timing in per_call")
    ap.add_argument(
        "--fresh-calibration", action="store_true", help="measure the plans now, into a temporary cache folder"
    )
    ap.add_argument("--out", help="also write the JSON here")
    return ap.parse_args(argv)


def demo_chain(profile: Path) -> MethodSpec:
    return MethodSpec(
        "eagle1_chain5",
        "eagle",
        {"eagle_choices": CHAIN5},
        len(CHAIN5),
        {"num_eagle_layers": len(CHAIN5), "max_non_leaves_per_layer": 1},
        {"eagle": "eagle"},
    )


def forward_calls(model, context: list[int], widths: list[int]) -> dict:
    """width -> a function doing one forward of `width` new tokens after `context` (logits for all), rolled back."""
    cache = model.new_cache(1)
    model.forward(cache, [context], logits="none")
    cache.commit_all()
    made = {}
    for width in widths:
        tokens = [(11 * i + 5) % 1000 + 10 for i in range(width)]

        def call(tokens=tokens):
            model.forward(cache, [tokens], logits="all")
            cache.rollback()

        made[width] = call
    return made


def per_call(models: dict, widths: list[int], rounds: int, calls: int) -> dict:
    """Interleaved per-call costs of each rule's target (module docstring)."""
    import torch

    context = [(7 * i + 3) % 1000 + 10 for i in range(96)]
    callers = {rule: forward_calls(model, context, widths) for rule, model in models.items()}
    keys = [(rule, w) for rule in callers for w in widths]
    ms: dict = {k: [] for k in keys}
    with torch.inference_mode():
        for rule, w in keys:  # warm-up
            for _ in range(3):
                callers[rule][w]()
        for round_ in range(rounds):
            shift = round_ % len(keys)
            for rule, w in keys[shift:] + keys[:shift]:
                fn = callers[rule][w]
                start = time.perf_counter()
                for _ in range(calls):
                    fn()
                ms[(rule, w)].append((time.perf_counter() - start) / calls * 1e3)
    one, wide = widths
    out = {}
    for rule in callers:
        out[rule] = {
            f"t({one})_ms": round(statistics.median(ms[(rule, one)]), 3),
            f"t({wide})_ms": round(statistics.median(ms[(rule, wide)]), 3),
            f"t({one})_ms_min": round(min(ms[(rule, one)]), 3),
            f"t({wide})_ms_min": round(min(ms[(rule, wide)]), 3),
            f"t({wide})/t({one})": round(
                statistics.median(b / a for a, b in zip(ms[(rule, one)], ms[(rule, wide)])), 3
            ),
            f"t({wide})/t({one})_rounds": [round(b / a, 3) for a, b in zip(ms[(rule, one)], ms[(rule, wide)])],
        }
    return out


def calibration_report(measured_now: int, seconds: float) -> dict:
    from specbuild.reference.decoder.lean import linear
    from specbuild.reference.decoder.lean import matmul_calibration as mc

    cal = mc.calibration()
    shapes = {}
    for shape, times in sorted(cal.times.items()):
        default = linear.fixed_plan(shape, linear.default_rule())
        shapes[f"{shape[0]}x{shape[1]}"] = {
            "measured": mc.choose(times, default).describe(),
            "default": f"{linear.default_rule()}: {default.describe()}",
            "us": {str(r): {k: round(v, 1) for k, v in cell.items()} for r, cell in times.items()},
        }
    return {
        "cache_file": str(cal.path),
        "shapes_measured_in_this_run": measured_now,
        "seconds_loading_measured_engines": round(seconds, 2),
        "default_rule": linear.default_rule(),
        "margin": mc.MARGIN,
        "shapes": shapes,
    }


def main(argv=None) -> dict:
    import torch

    from specbuild.reference.decoder.lean import linear
    from specbuild.reference.decoder.lean import matmul_calibration as mc

    args = parse_args(argv)
    torch.set_num_threads(1)
    rules = [r for r in args.rules.split(",") if r]
    methods = ["autoregressive", *[m for m in args.methods.split(",") if m and m != "autoregressive"]]
    profile = profile_dir(args.profile, progress=log)
    prompts = load_prompts(profile, max(args.prompts, args.concurrency), args.prompt_len)[
        : max(args.prompts, args.concurrency)
    ]
    specs = [s for s in [*method_specs(profile, 4), demo_chain(profile)] if s.label in methods]
    limits = dict(
        max_batch_size=max(1, args.concurrency),
        max_input_len=args.prompt_len,
        max_seq_len=args.prompt_len + args.new_tokens,
        max_num_tokens=8192,
    )
    saved = {name: os.environ.get(name) for name in (linear.MATMUL_ENV, "SPECBUILD_CACHE_DIR")}
    runs: dict[tuple[str, str], tuple] = {}
    load_avg = [list(os.getloadavg())]
    with tempfile.TemporaryDirectory(
        prefix="bench-layouts-", dir=REPO / ".cache" if (REPO / ".cache").is_dir() else None
    ) as tmp:
        if args.fresh_calibration:
            os.environ["SPECBUILD_CACHE_DIR"] = str(Path(tmp) / "cache")
        calibrated = {"measured": 0, "seconds": 0.0}
        for rule in rules:
            os.environ[linear.MATMUL_ENV] = rule
            linear.matmul_rule.cache_clear()
            before, started = mc.calibration().measured, time.perf_counter()
            engines = build_engines(specs, profile, Path(tmp) / rule, limits)
            if rule == "measured":
                calibrated = {"measured": mc.calibration().measured - before, "seconds": time.perf_counter() - started}
                log(
                    f"measured plans: {calibrated['measured']} shapes measured, loads took {calibrated['seconds']:.1f} s"
                )
            for s in specs:
                ex = executor(engines[s.label], args.concurrency, engines["draft"] if s.needs_draft else None, s.method)
                runs[(rule, s.label)] = (ex, engines[s.label])
        report: dict = {
            "machine": machine(),
            "profile": args.profile,
            "settings": {
                "rules": rules,
                "concurrency": args.concurrency,
                "rounds": args.rounds,
                "prompts": len(prompts),
                "prompt_len": args.prompt_len,
                "new_tokens": args.new_tokens,
                "verify_width": args.verify_width,
                "per_call_rounds": args.per_call_rounds,
                "threads": 1,
                "fresh_calibration": args.fresh_calibration,
            },
        }
        if "measured" in rules:
            report["calibration"] = calibration_report(calibrated["measured"], calibrated["seconds"])
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        linear.matmul_rule.cache_clear()

        log(f"per-call costs: t(1) and t({args.verify_width}), {args.per_call_rounds} rounds")
        targets = {rule: runs[(rule, "autoregressive")][1].model for rule in rules}
        report["per_call"] = per_call(targets, [1, args.verify_width], args.per_call_rounds, args.calls)
        log(f"per-call: {report['per_call']}")

        if args.rounds:
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
                log(f"round {round_ + 1}: " + ", ".join(f"{r}/{m} {seconds[(r, m)][-1]:.2f}s" for r, m in keys))
            ref = "measured" if "measured" in rules else rules[0]
            report[f"speed_of_{ref}_over"] = {
                rule: {
                    m: {
                        "median": round(
                            statistics.median(o / c for o, c in zip(seconds[(rule, m)], seconds[(ref, m)])), 3
                        ),
                        "rounds": [round(o / c, 3) for o, c in zip(seconds[(rule, m)], seconds[(ref, m)])],
                    }
                    for m in methods
                }
                for rule in rules
                if rule != ref
            }
            report["speedup_vs_autoregressive"] = {
                rule: {
                    m: round(
                        statistics.median(b / s for b, s in zip(seconds[(rule, "autoregressive")], seconds[(rule, m)])),
                        3,
                    )
                    for m in methods
                }
                for rule in rules
            }
            report["outputs_identical_across_rules"] = {
                m: all(outputs[(rule, m)] == outputs[(rules[0], m)] for rule in rules) for m in methods
            }
    load_avg.append(list(os.getloadavg()))
    report["load_average_start_end"] = load_avg
    emit(report, args.out)
    return report


if __name__ == "__main__":
    main()
