"""What the Triton deployment keeps of the in-process decoder: served / in-process output tokens per second, for the
baseline and the speculative deployment of one recipe, measured in one run, interleaved. Prints one JSON document.

    PYTHONPATH=pipeline python bench/served.py                      # recipes/demo.yaml, concurrency 1 and 4
    PYTHONPATH=pipeline python bench/served.py --recipe recipes/reference/draft_target.yaml --concurrency 1,2,4,8

The recipe's engines and both repositories (target and baseline) are built into --work (default .cache/served/,
reused when present), both repositories are served by one tritonserver each (free loopback ports), and the same
engine folders are loaded here for the in-process runs. Each round runs, per concurrency level, four variants in an
order that rotates from round to round: served speculative, in-process speculative, served baseline, in-process
baseline. A variant sends the same requests (the recipe's validation prompts in turn, tokenized as preprocessing
does; max(prompts, 4 x c) of them), greedy, `--max-tokens` each, with `c` requests in flight (closed loop; in-process: the Executor's in-flight batching
with at most `c` requests, as the server's core sees them). Served requests stream over HTTP (generate_stream, as
the validation suite's performance check sends them) to the recipe's serving model (the ensemble, or the BLS for
draft-target and prompt lookup); tokens are counted from the returned output_ids.

`--stream-interval N` (N > 1) also serves both deployments with the recipe's `triton.stream_interval` set to N (a
streamed response on a request's first step, every N-th and its last, as TensorRT-LLM's LLM API does; repositories
under --work/stream_interval_N/, the same engines) and reports them beside the default's, interleaved in the same
rounds: the default (one response per step, the contract clients count iterations from) is always measured.

`--decode-cpus` (default auto, as `specbuild compile` and `serve`) keeps CPUs for the core's decoding thread
(pipeline/specbuild/serve/decode_cpus.py); the served runs' clients then run on the other CPUs, beside tritonserver.
`bench/cpus.py` compares auto with off.

Beside tokens/s, each variant's CPU time per generated token is read from /proc: per process of the server
(tritonserver and each python-backend stub, by model name) and of this process for the in-process runs, so the
report tells whether a served run lost by decoding slower in the core stub (`cores_cpu_over_in_process` > 1) or
by waiting (the rest of the ratio: request hops, tokenization, HTTP).

Nothing asserts on speed. `goals` reports issue 15's: served baseline >= 0.9x and served speculative >= 0.85x of the
same decoder in process (at every measured level). Ratios are medians of per-round ratios; read them, not the
absolute tokens/s, on a shared machine.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import statistics
import sys
import threading
import time
from collections import deque
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_setup import REPO, logger  # noqa: E402  (puts pipeline/ on sys.path, HF_HUB_OFFLINE)

GOALS = {"baseline": 0.9, "speculative": 0.85}


log = logger("served")


# ------------------------------------------------------------------------------------------------ setup
def with_stream_interval(recipe, interval: int):
    """The recipe with triton.stream_interval = interval, refused as `specbuild check` would refuse it."""
    from specbuild.recipe.loader import general_findings
    from specbuild.runtimes.build import resolve_build

    triton = recipe.triton.model_copy(update={"stream_interval": interval})
    changed = recipe.model_copy(update={"triton": triton})
    problems = list(general_findings(resolve_build(changed)))
    if problems:
        raise SystemExit(
            "--stream-interval: " + "; ".join(f"{'.'.join(map(str, p.path))}: {p.message}" for p in problems)
        )
    return changed


def interval_layout(recipe, layout, work: Path, interval: int, rebuild: bool):
    """Both repositories of `recipe` at triton.stream_interval = interval, beside `layout`'s, on its engines."""
    from specbuild.plan import Layout
    from specbuild.runtimes.build import resolve_build

    changed = with_stream_interval(recipe, interval)
    resolved = resolve_build(changed)
    root = work / f"stream_interval_{interval}"
    out = Layout(work / "engines", root / "triton_repo", root / "reports", recipe.name)
    if rebuild or not out.repository().is_dir() or not out.repository("baseline").is_dir():
        log(f"writing the repositories at stream_interval {interval} into {root}")
        for role in ("target", "baseline"):
            resolved.runtime.write_repository(changed, resolved.spec, out, role)
    return out


def build(recipe_path: Path, work: Path, rebuild: bool):
    """(recipe, layout): engines and both repositories under `work` (reused unless --rebuild)."""
    from specbuild.compile import build_engines
    from specbuild.plan import Layout
    from specbuild.recipe import load_recipe
    from specbuild.runtimes.build import resolve_build

    recipe = load_recipe(recipe_path)
    if not recipe.builds_baseline:
        raise SystemExit(f"{recipe_path}: the recipe builds no baseline (validation.require_lossless: true needs one)")
    layout = Layout(work / "engines", work / "triton_repo", work / "reports", recipe.name)
    stamp = work / f"{recipe.name}.recipe"
    text = recipe_path.read_text()
    if rebuild or not stamp.is_file() or stamp.read_text() != text or not layout.repository().is_dir():
        log(f"building engines and repositories of {recipe_path} into {work}")
        resolved = resolve_build(recipe)
        build_engines(resolved, layout)
        for role in ("target", "baseline"):
            resolved.runtime.write_repository(recipe, resolved.spec, layout, role)
        stamp.write_text(text)
    return recipe, layout


def token_prompts(recipe, count: int) -> tuple[list[str], list[list[int]]]:
    from transformers import AutoTokenizer

    from specbuild.recipe.prompts import load_prompts

    texts = [p.text for p in load_prompts(recipe)][:count]
    tok = AutoTokenizer.from_pretrained(recipe.tokenizer_dir, legacy=False)
    return texts, [tok.encode(t, add_special_tokens=True) for t in texts]  # preprocessing's add_special_tokens


# ------------------------------------------------------------------------------------------------ in process
class InProcess:
    """The engine folders of a deployment, decoded here by the reference Executor with the KV reuse its served core
    has (the repository's tensorrt_llm `enable_kv_cache_reuse`): the same prompts come back round after round, and
    a core that reuses their prefixes must be compared with a decoder that does too."""

    def __init__(self, layout, role: str, end_id: int | None):
        from google.protobuf.json_format import MessageToDict

        from specbuild.reference.engine_folder import load_engine
        from specbuild.reference.decoder.executor import Executor
        from specbuild.repository.engine.configs import parse_pbtxt
        from specbuild.standalone.model_parameters import bool_parameter

        engine = load_engine(layout.engine(role))
        draft_dir = layout.engine("draft")
        draft = load_engine(draft_dir) if role == "target" and draft_dir.is_dir() else None
        # the core's config as the python backend hands it to the model, read by the core's own rule
        core = MessageToDict(
            parse_pbtxt((layout.repository(role) / "tensorrt_llm" / "config.pbtxt").read_text()),
            preserving_proto_field_name=True,
        )
        reuse = bool_parameter(core, "enable_kv_cache_reuse", True)
        self.executor = Executor(engine, draft, enable_kv_cache_reuse=reuse)
        self.end_id = end_id

    def run(self, prompts: list[list[int]], max_tokens: int, concurrency: int) -> tuple[int, float]:
        """(generated tokens, seconds) for the prompts with at most `concurrency` requests in flight."""
        from specbuild.reference.decoder.executor import Request

        pending = deque(prompts)
        active: set[int] = set()
        tokens = 0
        start = time.perf_counter()
        while pending or active:
            while pending and len(active) < concurrency:
                active.add(
                    self.executor.enqueue(
                        Request(
                            input_ids=pending.popleft(),
                            max_new_tokens=max_tokens,
                            end_id=self.end_id,
                            pad_id=self.end_id,
                        )
                    )
                )
            for event in self.executor.step():
                tokens += len(event.new_tokens)
                if event.finished:
                    active.discard(event.request_id)
        return tokens, time.perf_counter() - start


# ------------------------------------------------------------------------------------------------ served
class Served:
    """One tritonserver; clients stream from its serving model over persistent HTTP connections."""

    def __init__(self, repository: Path, model: str, log_path: Path, stream: bool = True, decode_cpus: str = "auto"):
        from specbuild.serve import TritonServer

        self.server = TritonServer(repository, log_path=log_path, decode_cpus=decode_cpus)
        self.model = model
        self.stream = stream

    def __enter__(self):
        self.server.__enter__()
        host, port = self.server.http_url.split("//")[-1].rsplit(":", 1)
        self.host, self.port = host, int(port)
        return self

    def __exit__(self, *exc):
        return self.server.__exit__(*exc)

    def one(self, conn: http.client.HTTPConnection, prompt: str, max_tokens: int) -> int:
        body = json.dumps(
            {
                "text_input": prompt,
                "max_tokens": max_tokens,
                "top_k": 1,
                "exclude_input_in_output": True,
                "stream": self.stream,
            }
        ).encode()
        endpoint = "generate_stream" if self.stream else "generate"
        conn.request("POST", f"/v2/models/{self.model}/{endpoint}", body, {"Content-Type": "application/json"})
        response = conn.getresponse()
        if response.status != 200:
            raise RuntimeError(f"{self.model}: HTTP {response.status}: {response.read()[:300]!r}")
        tokens = 0
        if not self.stream:
            event = json.loads(response.read())
            if "error" in event:
                raise RuntimeError(f"{self.model}: {event['error']}")
            return len([t for t in flat(event.get("output_ids") or []) if t != -1])
        for line in response:
            if line.startswith(b"data: "):
                event = json.loads(line[6:])
                if "error" in event:
                    raise RuntimeError(f"{self.model}: {event['error']}")
                tokens += len([t for t in flat(event.get("output_ids") or []) if t != -1])
        return tokens

    def run(self, prompts: list[str], max_tokens: int, concurrency: int) -> tuple[int, float]:
        pending = deque(prompts)
        lock = threading.Lock()
        counts: list[int] = []
        errors: list[BaseException] = []

        def client():
            conn = http.client.HTTPConnection(self.host, self.port, timeout=300)
            try:
                while True:
                    with lock:
                        if not pending or errors:
                            return
                        prompt = pending.popleft()
                    n = self.one(conn, prompt, max_tokens)
                    with lock:
                        counts.append(n)
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)
            finally:
                conn.close()

        from specbuild.serve import decode_cpus

        threads = [threading.Thread(target=client) for _ in range(concurrency)]
        start = time.perf_counter()
        with decode_cpus.running_on(self.server.client_cpus):  # the clients start here: off the decoder's CPUs
            for t in threads:
                t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        return sum(counts), time.perf_counter() - start


def server_cpu_s(server_pid: int) -> dict[str, float]:
    """CPU seconds so far of a tritonserver and of its python-backend stubs, summed per model (the instances of
    one model, e.g. tensorrt_llm_0_0 and tensorrt_llm_1_0, count as tensorrt_llm)."""
    from specbuild.validate.local_server import LocalServer, cpu_seconds_of

    cpu = {"tritonserver": cpu_seconds_of(server_pid) or 0.0}
    for instance, pid in LocalServer(server_pid).stubs().items():
        model = re.sub(r"_\d+_\d+$", "", instance)
        cpu[model] = cpu.get(model, 0.0) + (cpu_seconds_of(pid) or 0.0)
    return cpu


def flat(ids) -> list:
    out = []
    for x in ids if isinstance(ids, list) else [ids]:
        out += flat(x) if isinstance(x, list) else [x]
    return out


def cores_cpu(per_process: dict[str, float]) -> float:
    """The served deployment's decoding cores (tensorrt_llm, and tensorrt_llm_draft where there is one)."""
    return sum(v for k, v in per_process.items() if k.startswith("tensorrt_llm") and k != "tensorrt_llm_bls")


def cpu_now(runner) -> dict[str, float]:
    """CPU seconds so far: this process's for an in-process runner, else its server's, per process."""
    if isinstance(runner, InProcess):
        return {"this_process": time.process_time()}
    return server_cpu_s(runner.server.pid)


# ------------------------------------------------------------------------------------------------ the run
def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recipe", type=Path, default=REPO / "recipes" / "demo.yaml")
    parser.add_argument("--work", type=Path, default=REPO / ".cache" / "served")
    parser.add_argument("--rebuild", action="store_true", help="rebuild engines and repositories")
    parser.add_argument("--prompts", type=int, default=12)
    parser.add_argument(
        "--requests",
        type=int,
        default=None,
        help="requests per run (prompts in turn); default "
        "max(prompts, 4 x concurrency), so every level keeps its clients busy",
    )
    parser.add_argument("--max-tokens", type=int, default=None, help="default: the recipe's validation.max_tokens")
    parser.add_argument("--concurrency", default="1,4")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--no-stream",
        action="store_true",
        help="non-streamed requests (generate) instead of "
        "generate_stream (what the validation suite's performance check sends)",
    )
    parser.add_argument(
        "--stream-interval",
        type=int,
        default=1,
        help="also serve both deployments with triton.stream_interval N (> 1) and report them beside the default (1)",
    )
    parser.add_argument(
        "--threads", type=int, default=1, help="torch threads here and in the server's core (SPECBUILD_TORCH_THREADS)"
    )
    parser.add_argument(
        "--decode-cpus",
        default="auto",
        help="CPUs kept for the core's decoding thread "
        "(specbuild serve --decode-cpus: auto, off, or ids); the clients run on the others",
    )
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)

    import torch

    torch.set_num_threads(args.threads)
    os.environ["SPECBUILD_TORCH_THREADS"] = str(args.threads)
    from specbuild.methods import describe

    recipe, layout = build(args.recipe.resolve(), args.work.resolve(), args.rebuild)
    interval = args.stream_interval
    if interval < 1:
        raise SystemExit(f"--stream-interval {interval}: give a positive number of steps (1: the default only)")
    spaced = interval_layout(recipe, layout, args.work.resolve(), interval, args.rebuild) if interval > 1 else None
    spec = describe(recipe)
    max_tokens = args.max_tokens or recipe.validation.max_tokens
    levels = [int(c) for c in args.concurrency.split(",") if c.strip()]
    texts, ids = token_prompts(recipe, args.prompts)
    from transformers import AutoTokenizer

    end_id = AutoTokenizer.from_pretrained(recipe.tokenizer_dir).eos_token_id
    log(
        f"{recipe.name}: {spec.method}, {len(texts)} prompts, {max_tokens} tokens, levels {levels}, "
        f"{args.rounds} rounds"
    )
    inproc = {"speculative": InProcess(layout, "target", end_id), "baseline": InProcess(layout, "baseline", end_id)}
    logs = args.work.resolve() / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    models = {"speculative": spec.serving_model, "baseline": "ensemble"}
    stream = not args.no_stream
    import contextlib

    spaced_name = f"served_stream_interval_{interval}"
    with contextlib.ExitStack() as stack:
        served = {
            ("served", dep): stack.enter_context(
                Served(layout.repository(role), models[dep], logs / f"{dep}.log", stream, args.decode_cpus)
            )
            for dep, role in (("speculative", "target"), ("baseline", "baseline"))
        }
        variants = [
            ("served", "speculative"),
            ("in_process", "speculative"),
            ("served", "baseline"),
            ("in_process", "baseline"),
        ]
        if spaced is not None:
            for dep, role in (("speculative", "target"), ("baseline", "baseline")):
                served[(spaced_name, dep)] = stack.enter_context(
                    Served(
                        spaced.repository(role),
                        models[dep],
                        logs / f"{dep}-{spaced_name}.log",
                        stream,
                        args.decode_cpus,
                    )
                )
            variants[2:2] = [(spaced_name, "speculative")]
            variants.append((spaced_name, "baseline"))
        for where, dep in variants:  # warm up every path once
            if where == "in_process":
                inproc[dep].run(ids[:1], max_tokens, 1)
            else:
                served[(where, dep)].run(texts[:1], max_tokens, 1)
        results: dict = {c: {f"{w}.{d}": [] for w, d in variants} for c in levels}
        cpu: dict = {c: {f"{w}.{d}": [] for w, d in variants} for c in levels}  # ms per token, per process
        for r in range(args.rounds):
            for c in levels:
                k = r % len(variants)
                order = variants[k:] + variants[:k]
                n = args.requests or max(len(texts), 4 * c)
                for where, dep in order:
                    runner = inproc[dep] if where == "in_process" else served[(where, dep)]
                    prompts = ids if where == "in_process" else texts
                    before = cpu_now(runner)
                    tokens, seconds = runner.run([prompts[i % len(prompts)] for i in range(n)], max_tokens, c)
                    after = cpu_now(runner)
                    results[c][f"{where}.{dep}"].append(tokens / seconds)
                    cpu[c][f"{where}.{dep}"].append({k: 1000 * (after[k] - before.get(k, 0.0)) / tokens for k in after})
                    log(f"round {r + 1}, c={c}, {where} {dep}: {tokens / seconds:.1f} tok/s")
    split = served[("served", "speculative")].server.cpu_split
    report = {
        "recipe": str(args.recipe),
        "method": spec.method,
        "serving_model": models,
        "prompts": len(texts),
        "max_tokens": max_tokens,
        "rounds": args.rounds,
        "threads": args.threads,
        "protocol": "HTTP generate_stream" if stream else "HTTP generate",
        "stream_interval": interval,
        "decode_cpus": {"choice": args.decode_cpus, "kept": split.env_value() if split else None},
        "machine": {"cpus": os.cpu_count(), "load_average": os.getloadavg()},
        "levels": {},
    }
    goals = {}
    for c in levels:
        per = results[c]
        ratio = {
            dep: [s / i for s, i in zip(per[f"served.{dep}"], per[f"in_process.{dep}"])]
            for dep in ("speculative", "baseline")
        }
        speedup = {
            where: [s / b for s, b in zip(per[f"{where}.speculative"], per[f"{where}.baseline"])]
            for where in ("served", "in_process")
        }
        report["levels"][c] = {
            "tokens_per_s": {k: round(statistics.median(v), 1) for k, v in per.items()},
            "served_over_in_process": {k: round(statistics.median(v), 3) for k, v in ratio.items()},
            "served_over_in_process_rounds": {k: [round(x, 3) for x in v] for k, v in ratio.items()},
            "speculative_over_baseline": {k: round(statistics.median(v), 3) for k, v in speedup.items()},
            "cpu_ms_per_token": {
                k: {proc: round(statistics.median(r[proc] for r in v), 3) for proc in v[0]} for k, v in cpu[c].items()
            },
            "cores_cpu_over_in_process": {
                dep: round(
                    statistics.median(
                        cores_cpu(s) / i["this_process"]
                        for s, i in zip(cpu[c][f"served.{dep}"], cpu[c][f"in_process.{dep}"])
                    ),
                    3,
                )
                for dep in ("speculative", "baseline")
            },
        }
        if spaced is not None:
            spaced_ratio = {
                dep: [s / i for s, i in zip(per[f"{spaced_name}.{dep}"], per[f"in_process.{dep}"])]
                for dep in ("speculative", "baseline")
            }
            report["levels"][c][f"{spaced_name}_over_in_process"] = {
                k: round(statistics.median(v), 3) for k, v in spaced_ratio.items()
            }
            report["levels"][c][f"{spaced_name}_over_in_process_rounds"] = {
                k: [round(x, 3) for x in v] for k, v in spaced_ratio.items()
            }
        for dep, goal in GOALS.items():
            got = statistics.median(ratio[dep])
            goals.setdefault(dep, {"goal": goal, "met": True, "worst": None})
            goals[dep]["worst"] = got if goals[dep]["worst"] is None else min(goals[dep]["worst"], got)
            goals[dep]["met"] &= got >= goal
    report["goals"] = goals  # judged on the default (stream_interval 1) only
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
