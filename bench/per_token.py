"""Where a decoded token's time goes: our lean forward at one token beside llama.cpp's plain decoding, same target.

    PYTHONPATH=pipeline python bench/per_token.py --profile base --llama-cpp $SOURCE:$BUILD --out bench/results/x.json

Four timings, alternated round by round (medians over rounds; one thread each):
- `ours_t1`: a one-token forward of our lean target (`CausalLM`, logits for the token) after a 96-token context,
  the cache rolled back after each call: the t(1) of decode.py's cost model;
- `ours_matmuls_only`: the same forward's matrices alone (every layer's qkv, o, gate/up and down and the lm_head, one
  row each, through the same `lean/linear.py` kernels): what reading the weights costs us without anything else;
- `ours_t1_bfloat16` (with --bfloat16): the same forward of the target loaded in bfloat16 (oneDNN-packed weights);
- `llama_cpp_plain_f32` / `llama_cpp_plain_f16`: llama.cpp's own generation time per token (`decoded N tokens in S
  seconds`, prompt excluded) for 64 new tokens of plain decoding of the same target converted to GGUF
  (bench/llamacpp.py), one process per round.
`matrix_megabytes` is what the one-token forward's matrices hold in float32; `gigabytes_per_s` divides it by each
time (the 16-bit ones read half of it). Prints JSON; nothing asserts on speed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_setup import emit, load_prompts, logger, machine, profile_dir  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
log = logger("per_token")


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", default="base")
    ap.add_argument("--profile-dir", help="use this zoo folder as is")
    ap.add_argument(
        "--llama-cpp",
        required=True,
        metavar="SOURCE:BUILD",
        help="llama.cpp's source folder (the llama-cpp-python sdist's vendor/llama.cpp) and build folder",
    )
    ap.add_argument("--calls", type=int, default=40, help="our calls per timing")
    ap.add_argument("--new-tokens", type=int, default=64, help="llama.cpp's tokens per run")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument(
        "--bfloat16",
        action="store_true",
        help="also time a one-token forward of the target loaded in bfloat16 (`ours_t1_bfloat16`: what a "
        "16-bit target would cost beside llama.cpp's f16; its tokens may differ from float32's)",
    )
    ap.add_argument("--out", help="also write the JSON here")
    return ap.parse_args(argv)


def one_token_forward(folder: Path, context: list[int], dtype: str):
    """The target loaded in `dtype` and a function doing one one-token forward after `context` (rolled back)."""
    from specbuild.reference.decoder.model import CausalLM

    lm = CausalLM.from_pretrained(folder, dtype=dtype)
    cache = lm.new_cache(1)
    lm.forward(cache, [context], logits="none")
    cache.commit_all()

    def t1():
        lm.forward(cache, [[context[-1]]], logits="all")
        cache.rollback()

    return lm, t1


def ours(folder: Path, context: list[int], calls: int, bfloat16: bool) -> tuple[dict, float]:
    """name -> a function timing `calls` calls (ms per call), and the forward's matrices in MB."""
    import torch

    lm, t1 = one_token_forward(folder, context, "float32")
    fns = {"ours_t1": t1}
    linears = [lin for layer in lm.lean.layers for lin in (layer.qkv, layer.o, layer.gate_up, layer.down)]
    linears.append(lm.lean.lm_head)
    rows = [torch.randn(1, lin.weight.shape[-1]) for lin in linears]
    megabytes = sum(lin.weight.numel() * lin.weight.element_size() for lin in linears) / 1e6

    def matmuls():
        for lin, x in zip(linears, rows):
            lin(x)

    def timed(fn):
        def run() -> float:
            with torch.inference_mode():
                start = time.perf_counter()
                for _ in range(calls):
                    fn()
                return (time.perf_counter() - start) / calls * 1e3

        return run

    fns["ours_matmuls_only"] = matmuls
    if bfloat16:
        fns["ours_t1_bfloat16"] = one_token_forward(folder, context, "bfloat16")[1]
    with torch.inference_mode():  # warm-up
        for _ in range(3):
            for fn in fns.values():
                fn()
    return {name: timed(fn) for name, fn in fns.items()}, megabytes


def llama_cpp(spec: str, profile: Path, prompt: str, new_tokens: int) -> dict:
    from llamacpp import LlamaCpp, variants

    source, _, build = spec.partition(":")
    lc = LlamaCpp(Path(source), Path(build), profile, REPO / ".cache" / "llama-cpp", threads=1)
    chosen = {v.label: v for v in variants(4) if v.label in ("plain_f32", "plain_f16")}

    def timed(variant):
        def run() -> float:
            out = lc.run(variant, prompt, new_tokens)
            return out.decode_seconds / out.tokens * 1e3

        return run

    for v in chosen.values():  # convert before timing anything
        lc.argv(v, "", 1)
    return {f"llama_cpp_{label}": timed(v) for label, v in chosen.items()}


def main(argv=None) -> dict:
    import torch
    from transformers import AutoTokenizer

    args = parse_args(argv)
    torch.set_num_threads(1)
    profile = Path(args.profile_dir) if args.profile_dir else profile_dir(args.profile, progress=log)
    context = load_prompts(profile, 1, 96)[0]
    tokenizer = AutoTokenizer.from_pretrained(profile / "tokenizer")
    prompt = tokenizer.decode(context[1:] if context[0] == tokenizer.bos_token_id else context)
    timers, megabytes = ours(profile / "target", context, args.calls, args.bfloat16)
    timers.update(llama_cpp(args.llama_cpp, profile, prompt, args.new_tokens))
    report: dict = {
        "machine": machine(),
        "profile": args.profile,
        "settings": {
            "context": len(context),
            "calls": args.calls,
            "new_tokens": args.new_tokens,
            "rounds": args.rounds,
            "threads": 1,
            "bfloat16": args.bfloat16,
        },
    }
    times: dict[str, list[float]] = {name: [] for name in timers}
    names = list(timers)
    for r in range(args.rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            times[name].append(timers[name]())
        log(f"round {r + 1}: " + ", ".join(f"{n} {t[-1]:.2f} ms" for n, t in times.items()))
    medians = {name: round(statistics.median(t), 3) for name, t in times.items()}
    report["machine"]["load_average_at_end"] = list(os.getloadavg())
    report["per_token_ms"] = medians
    report["per_token_ms_rounds"] = {name: [round(x, 3) for x in t] for name, t in times.items()}
    report["matrix_megabytes"] = round(megabytes, 1)
    report["gigabytes_per_s"] = {
        name: round(megabytes * (0.5 if name.endswith(("f16", "bfloat16")) else 1) / ms, 2)
        for name, ms in medians.items()
    }
    report["ratios_per_round"] = {
        f"{name}_over_llama_cpp_plain_f32": round(
            statistics.median([a / b for a, b in zip(times[name], times["llama_cpp_plain_f32"])]), 3
        )
        for name in times
        if name != "llama_cpp_plain_f32"
    }
    emit(report, args.out)
    return report


if __name__ == "__main__":
    main()
