"""Per-call cost of one model forward: our lean forward next to transformers', for 1/4/8/16 new tokens.

    PYTHONPATH=pipeline python bench/forward.py --profile tiny          # checkpoints/tiny (target and draft)

Each call feeds S new tokens after a prefilled context (the shape of a decode step, S = 1, or of a chain or tree
verification, S > 1) and returns logits for all of them; the cache is rolled back after every call so every call
sees the same context. Three implementations, timed in interleaved rounds (medians over rounds):
- `lean`: `CausalLM` with the lean forward (specbuild.reference.decoder.lean) over the position-addressed KVCache;
- `transformers_over_our_cache`: `CausalLM(forward="transformers")`: transformers' decoder fed our 4D mask and
  positions, writing the same KVCache (the fallback path for non-Llama models);
- `transformers`: the model's own `forward(input_ids, past_key_values=DynamicCache)` as `generate` calls it,
  cropped back to the context after each call.
Also `tree_lean`: the lean forward of S tokens as a token tree (a random tree mask), the verification shape of
Medusa/EAGLE/lookahead. Prints JSON (see bench/README.md); nothing asserts on speed.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_setup import emit, logger, machine, profile_dir  # noqa: E402


log = logger("forward")


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", default="tiny")
    ap.add_argument("--profile-dir", help="use this zoo folder as is")
    ap.add_argument("--models", default="target,draft", help="zoo sub-folders to measure")
    ap.add_argument("--tokens", default="1,4,8,16", help="new tokens per call")
    ap.add_argument("--context", type=int, default=96, help="tokens already in the cache")
    ap.add_argument("--calls", type=int, default=50, help="calls per timing")
    ap.add_argument("--rounds", type=int, default=7, help="interleaved rounds (medians reported)")
    ap.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", help="also write the JSON here")
    return ap.parse_args(argv)


def _tree_mask(n: int, rng: random.Random):
    import torch

    parents = [-1] + [rng.randrange(i) for i in range(1, n)]
    mask = torch.zeros(n, n, dtype=torch.bool)
    depth = [0] * n
    for i, p in enumerate(parents):
        if p >= 0:
            mask[i] = mask[p]
            depth[i] = depth[p] + 1
        mask[i, i] = True
    return mask, depth


def callers(folder: Path, dtype: str, context: list[int], sizes: list[int]) -> dict:
    """name -> size -> a function doing one S-token forward from the same context."""
    import torch
    from transformers import DynamicCache

    from specbuild.reference.decoder.model import CausalLM

    lean = CausalLM.from_pretrained(folder, dtype=dtype, forward="lean")
    ours_hf = CausalLM.from_pretrained(folder, dtype=dtype, forward="transformers")
    rng = random.Random(0)
    tokens = {s: [rng.randrange(lean.vocab_size) for _ in range(s)] for s in sizes}

    def ours(model, tree: bool):
        cache = model.new_cache(1)
        model.forward(cache, [context], logits="none")
        cache.commit_all()
        made = {}
        for s in sizes:
            mask, depth = _tree_mask(s, rng)
            positions = [[len(context) + d for d in depth]] if tree else None
            attend = [mask] if tree else None

            def call(s=s, positions=positions, attend=attend):
                model.forward(cache, [tokens[s]], positions=positions, attend=attend, logits="all")
                cache.rollback()

            made[s] = call
        return made

    hf = ours_hf.hf  # a separate copy of the weights, loaded by transformers
    hf_cache = DynamicCache(config=hf.config)
    with torch.inference_mode():
        ids = torch.tensor([context])
        hf(input_ids=ids, cache=hf_cache, use_cache=True)

    def plain(s):
        ids = torch.tensor([tokens[s]])
        n = len(context)

        def call():
            hf(
                input_ids=ids,
                attention_mask=torch.ones(1, n + s, dtype=torch.long),
                cache=hf_cache,
                use_cache=True,
                logits_to_keep=0,
            )
            hf_cache.crop(-s)

        return call

    return {
        "lean": ours(lean, False),
        "tree_lean": ours(lean, True),
        "transformers_over_our_cache": ours(ours_hf, False),
        "transformers": {s: plain(s) for s in sizes},
    }


def measure(calls: dict, sizes: list[int], n_calls: int, rounds: int) -> dict:
    import torch

    names = list(calls)
    times: dict = {name: {s: [] for s in sizes} for name in names}
    with torch.inference_mode():
        for name in names:  # warm-up
            for s in sizes:
                for _ in range(3):
                    calls[name][s]()
        for r in range(rounds):
            order = names[r % len(names) :] + names[: r % len(names)]
            for s in sizes:
                for name in order:
                    fn = calls[name][s]
                    start = time.perf_counter()
                    for _ in range(n_calls):
                        fn()
                    times[name][s].append((time.perf_counter() - start) / n_calls * 1e3)
    return {name: {str(s): round(statistics.median(v), 4) for s, v in per.items()} for name, per in times.items()}


def main(argv=None) -> dict:
    import torch

    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    profile = Path(args.profile_dir) if args.profile_dir else profile_dir(args.profile, progress=log)
    sizes = [int(s) for s in args.tokens.split(",") if s.strip()]
    context = [(7 * i + 3) % 1000 + 10 for i in range(args.context)]
    report: dict = {
        "machine": machine(),
        "profile": args.profile,
        "settings": {
            "tokens": sizes,
            "context": args.context,
            "calls": args.calls,
            "rounds": args.rounds,
            "dtype": args.dtype,
            "threads": args.threads,
        },
        "per_call_ms": {},
        "transformers_over_lean": {},
    }
    for name in [m for m in args.models.split(",") if m]:
        log(f"{name}: loading")
        calls = callers(profile / name, args.dtype, context, sizes)
        log(f"{name}: timing {args.rounds} rounds")
        per_call = measure(calls, sizes, args.calls, args.rounds)
        report["per_call_ms"][name] = per_call
        report["transformers_over_lean"][name] = {
            s: round(per_call["transformers"][s] / per_call["lean"][s], 3) for s in per_call["lean"]
        }
        log(f"{name}: {json.dumps(per_call)}")
    emit(report, args.out)
    return report


if __name__ == "__main__":
    main()
