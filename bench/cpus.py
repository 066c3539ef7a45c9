"""Keeping a CPU for the reference core's decoding thread, or not: one repository served twice side by side (the
launcher's `decode_cpus` auto and off, pipeline/specbuild/serve/decode_cpus.py), the same closed-loop streamed load
sent to each in alternating order, rounds interleaved. Prints JSON: per concurrency level, tokens/s of each and the
median of the per-round ratios auto / off.

    PYTHONPATH=pipeline python bench/cpus.py                                   # the demo's baseline repository
    PYTHONPATH=pipeline python bench/cpus.py --repository .cache/served/triton_repo/demo --model ensemble

The repository comes from `bench/served.py` (its --work folder, default .cache/served/, written on first use).
Nothing asserts on speed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_setup import emit  # noqa: E402
from served import REPO, Served  # noqa: E402

PROMPTS = [
    'def parse(self, text):\n    """Parse the text and return a list of tokens.',
    "import os\nimport sys\n\ndef main(argv):",
    "class Cache:\n    def __init__(self, size):",
    "for i in range(10):\n    print(i)",
]


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repository", type=Path, default=REPO / ".cache" / "served" / "triton_repo" / "demo-baseline")
    ap.add_argument("--model", default="ensemble")
    ap.add_argument("--concurrency", default="1,16")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--kept", default="auto", help="the choice compared with off (auto, or CPU ids)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    os.environ.setdefault("SPECBUILD_TORCH_THREADS", "1")
    if not (args.repository / "tensorrt_llm").is_dir():
        raise SystemExit(f"{args.repository}: no repository — run bench/served.py once (it writes .cache/served/)")
    levels = [int(c) for c in args.concurrency.split(",") if c.strip()]
    work = REPO / ".cache" / "cpus-logs"
    work.mkdir(parents=True, exist_ok=True)
    report: dict = {
        "repository": str(args.repository),
        "model": args.model,
        "kept_choice": args.kept,
        "max_tokens": args.max_tokens,
        "rounds": args.rounds,
        "machine": {"cpus": os.cpu_count(), "load_average": os.getloadavg()},
        "levels": {},
    }
    with ExitStack() as stack:
        served = {
            name: stack.enter_context(Served(args.repository, args.model, work / f"{name}.log", decode_cpus=choice))
            for name, choice in (("auto", args.kept), ("off", "off"))
        }
        kept = served["auto"].server.cpu_split
        report["kept"] = kept.env_value() if kept else None
        for s in served.values():
            s.run(PROMPTS[:2], 8, 1)  # warm-up
        for c in levels:
            prompts = PROMPTS * max(3, c)
            tps = {"auto": [], "off": []}
            for r in range(args.rounds):
                for choice in ("auto", "off") if r % 2 == 0 else ("off", "auto"):
                    tokens, seconds = served[choice].run(prompts, args.max_tokens, c)
                    tps[choice].append(tokens / seconds)
                print(
                    f"[cpus] c={c} round {r + 1}: auto {tps['auto'][-1]:.0f}, off {tps['off'][-1]:.0f} tok/s",
                    file=sys.stderr,
                    flush=True,
                )
            ratios = [a / o for a, o in zip(tps["auto"], tps["off"])]
            report["levels"][c] = {
                "tokens_per_s": {k: round(statistics.median(v), 1) for k, v in tps.items()},
                "auto_over_off": round(statistics.median(ratios), 3),
                "auto_over_off_rounds": [round(x, 3) for x in ratios],
            }
    emit(report, args.out)
    return report


if __name__ == "__main__":
    main()
