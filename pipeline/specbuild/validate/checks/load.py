"""Load: N concurrent clients (HTTP generate_stream and gRPC stream) send greedy requests for T seconds, to a
server on this machine only (loopback; skipped otherwise). Every response must be complete and well formed, none
lost, none mixed between requests: each answer is compared with the single-request greedy answer of its own
prompt. An answer equal to another prompt's answer is "mixed" (a failure); one that differs from every answer is
"diverged" (reported: batch shape may change low-probability tokens, validation-metrics fact sheet)."""

from __future__ import annotations

import threading
import time

from specbuild.validate.checks.base import FAILED, PASSED, SKIPPED, WARNED, CheckResult, SuiteContext, timed

NAME, TITLE = "load", "Load (concurrent clients, nothing lost or mixed)"
MAX_REQUESTS_PER_CLIENT = 10_000


def _key(gen) -> tuple:
    return tuple(gen.ids) if gen.ids is not None else (gen.text,)


@timed
def run(ctx: SuiteContext) -> CheckResult:
    v = ctx.recipe.validation
    if not ctx.target.endpoints.loopback:
        return CheckResult(NAME, TITLE, SKIPPED, f"the load check runs only against a server on this machine "
                           f"(loopback), not {ctx.target.endpoints.http}")
    clients = ctx.options.load_clients or v.load_clients
    seconds = ctx.options.load_seconds or v.load_seconds
    expected = ctx.greedy_pass(ctx.target, "http")
    own = {p.index: _key(g) for p, g in zip(ctx.prompts, expected) if g.ok}
    by_answer: dict[tuple, set[int]] = {}
    for idx, k in own.items():
        by_answer.setdefault(k, set()).add(idx)
    protocols = ["http-stream", "grpc"] if ctx.target.endpoints.grpc else ["http-stream", "http"]
    params = ctx.greedy_params()
    counts = {"sent": 0, "complete": 0, "errors": 0, "incomplete": 0, "malformed": 0, "matched": 0, "mixed": 0,
              "diverged": 0}
    examples: dict[str, list[str]] = {}
    lock = threading.Lock()
    deadline = time.monotonic() + seconds
    ctx.progress(f"load: {clients} clients for {seconds:g} s", 0, 0)

    def note(kind: str, text: str) -> None:
        counts[kind] += 1
        if len(examples.setdefault(kind, [])) < 5:
            examples[kind].append(text)

    def client(i: int) -> None:
        protocol = protocols[i % len(protocols)]
        for j in range(MAX_REQUESTS_PER_CLIENT):
            if time.monotonic() >= deadline:
                return
            prompt = ctx.prompts[(i + j) % len(ctx.prompts)]
            with lock:
                counts["sent"] += 1
            try:
                gen = ctx.target.generate(prompt.text, params, protocol)
            except Exception as e:  # noqa: BLE001 - a response the client could not even read
                with lock:
                    counts["complete"] += 1
                    note("malformed", f"{protocol} prompt {prompt.id}: unreadable response: {type(e).__name__}: {e}")
                continue
            with lock:
                if not gen.ok:
                    note("errors", f"{protocol} prompt {prompt.id}: {gen.error}")
                    continue
                if not gen.final:
                    note("incomplete", f"{protocol} prompt {prompt.id}: no final response")
                    continue
                counts["complete"] += 1
                n = gen.num_tokens  # (no tokenizer call here: keep the clients' loop light)
                if not gen.text or (n is not None and n > params.max_tokens):
                    note("malformed", f"{protocol} prompt {prompt.id}: {n} tokens, text {gen.text[:40]!r}")
                    continue
                k = _key(gen)
                if prompt.index not in own or k == own[prompt.index]:
                    counts["matched"] += 1
                elif by_answer.get(k):
                    others = sorted(by_answer[k])
                    note("mixed", f"{protocol} prompt {prompt.id} got the answer of prompt "
                                  f"{ctx.prompts[others[0]].id}")
                else:
                    note("diverged", f"{protocol} prompt {prompt.id}: {gen.text[:40]!r}")
                ctx.progress(f"load: {clients} clients for {seconds:g} s", counts["complete"], 0)

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    lost = counts["sent"] - counts["complete"] - counts["errors"] - counts["incomplete"]
    live = ctx.target.server.model_ready(ctx.target.model)
    details = {"clients": clients, "seconds": seconds, "protocols": protocols, "wall_s": wall, **counts,
               "lost": lost, "requests_per_s": counts["complete"] / wall if wall else 0.0,
               "ready_after": live, "examples": examples}
    bad = {k: counts[k] for k in ("errors", "incomplete", "malformed", "mixed") if counts[k]}
    if lost:
        bad["lost"] = lost
    if not live:
        bad["not ready after the load"] = 1
    summary = (f"{counts['complete']}/{counts['sent']} requests complete from {clients} clients in {wall:.1f} s "
               f"({details['requests_per_s']:.1f} req/s), {counts['matched']} equal to their single-request answer")
    if bad:
        first = next((examples[k][0] for k in ("errors", "incomplete", "malformed", "mixed") if examples.get(k)), "")
        return CheckResult(NAME, TITLE, FAILED, ", ".join(f"{v} {k}" for k, v in bad.items()) + f" ({first}); "
                           + summary, details)
    if counts["diverged"]:
        return CheckResult(NAME, TITLE, WARNED, f"{counts['diverged']} answers differ from the single-request greedy "
                           "answer (batch-shape numerics?); " + summary, details)
    return CheckResult(NAME, TITLE, PASSED, summary, details)
