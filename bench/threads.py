"""What a second Python thread costs the decoder: our Executor (autoregressive, tiny zoo, concurrency 1) stepping
in one thread, alone, and with a companion thread woken through a queue after every step that runs W loop
iterations of Python each time (the reference core's delivery thread, reduced to its GIL traffic). Interleaved
rounds; prints JSON with each variant's median seconds and its ratio to the plain loop.

    PYTHONPATH=pipeline python bench/threads.py --rounds 4 --work 0,200,2000

See bench/README.md ("The core's two threads").
"""

from __future__ import annotations

import argparse
import json
import queue
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_setup import build_engines, load_prompts, machine, method_specs, profile_dir  # noqa: E402
from measure import executor  # noqa: E402


def decode(ex, prompts, new_tokens: int, after_step=None) -> float:
    """Seconds to decode all prompts in a fresh thread; `after_step(events)` runs after every step."""
    import torch

    from specbuild.reference.decoder.executor import Request

    def body():
        with torch.inference_mode():
            for p in prompts:
                ex.enqueue(Request(input_ids=list(p), max_new_tokens=new_tokens))
            while ex.has_work():
                events = ex.step()
                if after_step is not None:
                    after_step(events)

    start = time.perf_counter()
    worker = threading.Thread(target=body)
    worker.start()
    worker.join()
    return time.perf_counter() - start


def with_companion(ex, prompts, new_tokens: int, work: int) -> float:
    inbox: queue.SimpleQueue = queue.SimpleQueue()

    def companion():
        while inbox.get() is not None:
            total = 0
            for i in range(work):
                total += i

    thread = threading.Thread(target=companion, daemon=True)
    thread.start()
    try:
        return decode(ex, prompts, new_tokens, inbox.put)
    finally:
        inbox.put(None)
        thread.join()


def main(argv=None) -> dict:
    import torch

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", default="tiny")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--work", default="0,200,2000", help="loop iterations the companion runs per wake-up")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    profile = profile_dir(args.profile, progress=lambda m: print(m, file=sys.stderr))
    prompts = load_prompts(profile, args.prompts, 96)
    specs = [s for s in method_specs(profile, 4) if s.label == "autoregressive"]
    limits = dict(max_batch_size=1, max_input_len=96, max_seq_len=96 + args.new_tokens, max_num_tokens=8192)
    with tempfile.TemporaryDirectory(prefix="bench-threads-") as tmp:
        engine = build_engines(specs, profile, Path(tmp), limits)["autoregressive"]
        ex = executor(engine, 1)
        decode(ex, prompts[:1], 4)  # warm-up
        works = [int(w) for w in args.work.split(",") if w.strip()]
        seconds: dict[str, list[float]] = {"alone": [], **{f"companion_{w}": [] for w in works}}
        for _ in range(args.rounds):
            seconds["alone"].append(decode(ex, prompts, args.new_tokens))
            for w in works:
                seconds[f"companion_{w}"].append(with_companion(ex, prompts, args.new_tokens, w))
    alone = statistics.median(seconds["alone"])
    report = {
        "machine": machine(),
        "settings": vars(args),
        "median_seconds": {k: round(statistics.median(v), 3) for k, v in seconds.items()},
        "over_alone": {k: round(statistics.median(v) / alone, 3) for k, v in seconds.items()},
        "rounds_seconds": {k: [round(x, 3) for x in v] for k, v in seconds.items()},
    }
    print(json.dumps(report, indent=2))
    return report


if __name__ == "__main__":
    main()
