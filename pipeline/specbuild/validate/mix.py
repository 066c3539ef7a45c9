"""The request mix of the load check and the soak: good and bad requests at a fixed concurrency against one served
repository, then the server's health.

Good requests are greedy, over every protocol (HTTP generate, HTTP generate_stream, the gRPC stream), every model
clients call (the ensemble and the BLS of an engine repository; the one tensorrt_llm of an llm-api one), several
prompts and max_tokens. Each answer is compared with the single-request greedy answer of the same (model, prompt,
max_tokens), asked alone before the mix starts: `equal`, `mixed` (another prompt's answer: requests crossed),
`diverged` (neither: batch shape changed a low-probability token), `error` (refused), `no answer` (dropped,
timed out, no final response). Bad requests are every case of the bad-input check (checks/bad_input.py) for each
model: a case that must be refused and was answered, or that got no clean answer, is a problem; the cases in which
the client ends its own request mid-stream (Case.ended_by_client) are counted as `ended`, neither refused nor
answered. A request still
running when the mix gives up waiting (timeout + margin) is `lost`.

Afterwards: the server is live, every model of its repository ready, a normal request to each model succeeds,
and, when the server runs on this machine, no python backend stub died (a dead stub leaves its model "ready" on
Triton <= 24.12) and the RSS before and after are reported.

    result = run_mix(ctx, MixPlan.default(ctx, models), concurrency=32, requests=96, server=LocalServer(pid))
    result.problems, result.to_dict()
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Sequence

from specbuild.validate.client import GenerateParams, Generation
from specbuild.validate.checks.bad_input import cases

if TYPE_CHECKING:
    from specbuild.validate.checks.bad_input import Case
    from specbuild.validate.checks.base import Deployment, SuiteContext
    from specbuild.validate.local_server import LocalServer

# grpc-text: the gRPC stream asking for text_output only, as NVIDIA's clients do (the server then drops the
# other outputs it sends: a path of its own in the python backend)
PROTOCOLS_GRPC = ("http", "http-stream", "grpc", "grpc-text")
PROTOCOLS_HTTP = ("http", "http-stream")
MAX_EXAMPLES = 5
WAIT_MARGIN_S = 10.0  # beyond the request timeout, before a request still running counts as lost


@dataclass(frozen=True)
class Good:
    model: str
    protocol: str
    prompt: int  # index into ctx.prompts
    max_tokens: int

    @property
    def key(self) -> tuple[str, int, int]:
        return (self.model, self.prompt, self.max_tokens)

    def describe(self, ctx) -> str:
        return f"{self.model} {self.protocol} prompt {ctx.prompts[self.prompt].id} max_tokens {self.max_tokens}"


@dataclass(frozen=True)
class Bad:
    model: str
    case: "Case"

    def describe(self, ctx=None) -> str:
        return f"{self.model}: {self.case.name}"


@dataclass
class MixPlan:
    """What to send: the good kinds (cycled) and the bad ones (each at least once when the run is long enough),
    interleaved in a seeded order."""

    good: list[Good]
    bad: list[Bad]
    seed: int = 0

    @classmethod
    def default(
        cls,
        ctx: "SuiteContext",
        models: Sequence[str],
        *,
        prompts: int = 3,
        max_tokens: Sequence[int] | None = None,
        with_bad: bool = True,
        seed: int = 0,
    ) -> "MixPlan":
        protocols = PROTOCOLS_GRPC if ctx.target.endpoints.grpc else PROTOCOLS_HTTP
        n = max(1, min(prompts, len(ctx.prompts)))
        lengths = sorted(set(max_tokens or (max(1, ctx.max_tokens // 4), ctx.max_tokens)))
        good = [Good(m, p, i, t) for m in models for p in protocols for i in range(n) for t in lengths]
        bad = []
        if with_bad:
            for m in models:
                bad += [
                    Bad(m, c) for c in cases(ctx.for_model(m)) if not (c.needs_grpc and not ctx.target.endpoints.grpc)
                ]
        return cls(good, bad, seed)

    def jobs(self, good_requests: int | None) -> list:
        """One pass: `good_requests` good jobs (default: every kind once, and at least three good jobs per bad one)
        and every bad job, shuffled; bad jobs spread evenly through the pass."""
        rng = random.Random(self.seed)
        count = max(len(self.good), 3 * len(self.bad)) if good_requests is None else good_requests
        good = [self.good[i % len(self.good)] for i in range(count)] if self.good else []
        rng.shuffle(good)
        bad = list(self.bad)
        rng.shuffle(bad)
        if not bad:
            return good
        out, step = [], max(1, len(good) // len(bad)) if good else 1
        gi = iter(good)
        for b in bad:
            out += [j for _, j in zip(range(step), gi)]
            out.append(b)
        return out + list(gi)


@dataclass
class MixResult:
    concurrency: int
    wall_s: float = 0.0
    sent: int = 0
    good: dict[str, int] = field(
        default_factory=lambda: {k: 0 for k in ("sent", "equal", "mixed", "diverged", "error", "no answer")}
    )
    bad: dict[str, int] = field(
        default_factory=lambda: {k: 0 for k in ("sent", "refused", "answered", "accepted", "ended", "no answer")}
    )
    lost: int = 0
    by_case: dict[str, dict[str, int]] = field(default_factory=dict)
    by_model: dict[str, int] = field(default_factory=dict)
    health: dict = field(default_factory=dict)
    server: dict | None = None
    examples: dict[str, list[str]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    @property
    def answered(self) -> int:
        """Requests the server answered (a result or an error message): not lost, not dropped or timed out."""
        return self.sent - self.lost - self.good["no answer"] - self.bad["no answer"]

    @property
    def requests_per_s(self) -> float:
        return self.answered / self.wall_s if self.wall_s > 0 else 0.0

    def note(self, kind: str, text: str) -> None:
        if len(self.examples.setdefault(kind, [])) < MAX_EXAMPLES:
            self.examples[kind].append(text)

    def to_dict(self) -> dict:
        return {
            "concurrency": self.concurrency,
            "wall_s": round(self.wall_s, 3),
            "sent": self.sent,
            "answered": self.answered,
            "requests_per_s": round(self.requests_per_s, 3),
            "good": dict(self.good),
            "bad": dict(self.bad),
            "lost": self.lost,
            "by_case": self.by_case,
            "by_model": self.by_model,
            "health": self.health,
            "server": self.server,
            "examples": self.examples,
            "problems": list(self.problems),
        }


def _answer(gen: Generation) -> tuple[tuple | None, str]:
    """(ids, text) of an answer (ids None when the response carried none: llm-api, or text_output asked for)."""
    return (tuple(gen.ids) if gen.ids is not None else None, gen.text)


def _keys(answer: tuple[tuple | None, str]) -> list[tuple]:
    ids, text = answer
    return ([("ids", ids)] if ids is not None else []) + [("text", text)]


def _same(gen: Generation, want: tuple[tuple | None, str]) -> bool:
    """The answer equals the single-request one: token for token when both carry ids, else text for text."""
    ids, text = _answer(gen)
    return ids == want[0] if ids is not None and want[0] is not None else text == want[1]


def bad_outcomes(bad: dict[str, int]) -> str:
    """The bad requests of a mix in words: how many were refused, answered where a case allows it, ended by their
    own client mid-stream (neither refused nor answered), and what went wrong."""
    parts = [f"{bad['refused']} refused"]
    allowed = bad["answered"] - bad["accepted"]
    if allowed:
        parts.append(f"{allowed} answered where the case allows it")
    if bad["accepted"]:
        parts.append(f"{bad['accepted']} answered that must be refused")
    if bad.get("ended"):
        parts.append(f"{bad['ended']} ended by their client mid-stream")
    if bad["no answer"]:
        parts.append(f"{bad['no answer']} without a clean answer")
    return f"{bad['sent']} bad requests: " + ", ".join(parts)


def answered_cleanly(gen: Generation) -> bool:
    """The server answered (an error message or a complete result), rather than dropping or timing out."""
    if gen.ok:
        return gen.final
    err = gen.error or ""
    return not (err.startswith("connection error") or err.startswith("no final response"))


def single_answers(
    ctx: "SuiteContext", deps: dict[str, "Deployment"], goods: Sequence[Good]
) -> dict[tuple, tuple[tuple, str]]:
    """The greedy answer (ids key, text) of every (model, prompt, max_tokens), each asked alone over HTTP
    generate."""
    out: dict[tuple, tuple[tuple, str]] = {}
    keys = sorted({g.key for g in goods})
    ctx.progress("mix: single-request answers", 0, len(keys))
    for i, (model, prompt, max_tokens) in enumerate(keys, 1):
        gen = deps[model].generate(ctx.prompts[prompt].text, GenerateParams(max_tokens=max_tokens), "http")
        if gen.ok and gen.final:
            out[(model, prompt, max_tokens)] = _answer(gen)
        ctx.progress("mix: single-request answers", i, len(keys))
    return out


def run_mix(
    ctx: "SuiteContext",
    plan: MixPlan,
    *,
    concurrency: int,
    requests: int | None = None,
    seconds: float | None = None,
    server: "LocalServer | None" = None,
    expected: dict[tuple, tuple[tuple | None, str]] | None = None,
) -> MixResult:
    """Send the plan's jobs from `concurrency` clients: one pass of `requests` good jobs (and every bad one), or
    passes over it until `seconds` have gone by. Then check the server's health."""
    if (requests is None) == (seconds is None):
        raise ValueError("give requests or seconds")
    models = sorted({j.model for j in plan.good} | {j.model for j in plan.bad})
    deps = {m: ctx.for_model(m).target for m in models}
    result = MixResult(concurrency)
    if expected is None:
        expected = single_answers(ctx, deps, plan.good)
    missing = sorted({g.key for g in plan.good} - set(expected))
    for key in missing:
        result.problems.append(
            f"{key[0]}: prompt {ctx.prompts[key[1]].id} with max_tokens {key[2]} got no answer even when sent alone"
        )
    by_answer: dict[tuple, set[tuple]] = {}
    for key, answer in expected.items():
        for k in _keys(answer):
            by_answer.setdefault((key[0], k), set()).add(key)
    stubs_before = server.stubs() if server is not None else {}
    rss_before = server.rss_bytes() if server is not None else None

    one_pass = plan.jobs(requests)
    lock = threading.Lock()
    cursor = iter(range(10**9))
    deadline = time.monotonic() + seconds if seconds is not None else None
    running: dict[int, tuple[float, str]] = {}
    stage = f"mix: {concurrency} clients"
    ctx.progress(stage, 0, len(one_pass) if requests is not None else 0)
    done = 0

    def next_job():
        i = next(cursor)
        if deadline is None:
            return (i, one_pass[i]) if i < len(one_pass) else None
        return (i, one_pass[i % len(one_pass)]) if time.monotonic() < deadline else None

    def record_good(job: Good, gen: Generation) -> None:
        c = result.good
        c["sent"] += 1
        where = job.describe(ctx)
        if not gen.ok:
            kind = "no answer" if not answered_cleanly(gen) else "error"
            c[kind] += 1
            result.note(kind, f"{where}: {gen.error}")
            return
        if not gen.final:
            c["no answer"] += 1
            result.note("no answer", f"{where}: no final response")
            return
        k = _keys(_answer(gen))[0]
        want = expected.get(job.key)
        if want is None or _same(gen, want):
            c["equal"] += 1
        elif any(key[1] != job.prompt for key in by_answer.get((job.model, k), ())):
            c["mixed"] += 1
            other = next(key for key in by_answer[(job.model, k)] if key[1] != job.prompt)
            result.note("mixed", f"{where} got the answer of prompt {ctx.prompts[other[1]].id}")
        else:
            c["diverged"] += 1
            result.note("diverged", f"{where}: {gen.text[:40]!r}")

    def record_bad(job: Bad, gen: Generation) -> None:
        c = result.bad
        c["sent"] += 1
        row = result.by_case.setdefault(
            job.case.name, {"sent": 0, "refused": 0, "answered": 0, "ended": 0, "no answer": 0}
        )
        row["sent"] += 1
        if not answered_cleanly(gen):
            c["no answer"] += 1
            row["no answer"] += 1
            result.note("bad: no answer", f"{job.describe()}: {gen.error or 'no final response'}")
        elif job.case.ended_by_client:  # the client hung up or cancelled, cleanly: no answer was to be had
            c["ended"] += 1
            row["ended"] += 1
        elif gen.ok:
            c["answered"] += 1
            row["answered"] += 1
            if job.case.expect == "error":
                c["accepted"] += 1
                result.note("bad: accepted", f"{job.describe()}: answered ({gen.num_tokens} tokens), must be refused")
        else:
            c["refused"] += 1
            row["refused"] += 1

    last_taken = [time.monotonic()]

    def client(worker: int) -> None:
        nonlocal done
        while True:
            with lock:
                item = next_job()
                if item is None:
                    return
                result.sent += 1
                i, job = item
                last_taken[0] = time.monotonic()
                running[i] = (last_taken[0], job.describe(ctx))
                result.by_model[job.model] = result.by_model.get(job.model, 0) + 1
            gen = _send(ctx, deps, job)
            with lock:
                running.pop(i, None)
                (record_good if isinstance(job, Good) else record_bad)(job, gen)
                done += 1
                ctx.progress(stage, done, len(one_pass) if requests is not None else 0)

    threads = [threading.Thread(target=client, args=(w,), daemon=True, name=f"mix-{w}") for w in range(concurrency)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    # A request runs at most its client timeout; one still running that long after the last job was taken is lost
    # (its thread is left behind: a daemon blocked on a socket the server never answers).
    patience = max(d.timeout_s for d in deps.values()) + WAIT_MARGIN_S
    while any(t.is_alive() for t in threads):
        time.sleep(0.05)
        with lock:
            if time.monotonic() - last_taken[0] > patience and running:
                break
    result.wall_s = time.perf_counter() - t0
    with lock:
        result.lost = len(running)
        for since, what in list(running.values())[:MAX_EXAMPLES]:
            result.note("lost", f"{what}: no outcome after {time.monotonic() - since:.0f} s")
    result.health = server_health(ctx, deps)
    if server is not None:
        stubs_after = server.stubs()
        rss_after = server.rss_bytes()
        died = sorted(name for name, pid in stubs_before.items() if stubs_after.get(name) != pid)
        result.server = {
            "pid": server.pid,
            "alive": server.alive(),
            "stubs": sorted(stubs_after),
            "stubs_died": died,
            "rss_before_bytes": rss_before,
            "rss_after_bytes": rss_after,
            "rss_growth": (rss_after / rss_before - 1.0) if rss_before and rss_after else None,
        }
    result.problems += problems_of(result)
    return result


def _send(ctx: "SuiteContext", deps: dict[str, "Deployment"], job) -> Generation:
    try:
        if isinstance(job, Good):
            prompt = ctx.prompts[job.prompt].text
            params = GenerateParams(max_tokens=job.max_tokens)
            if job.protocol == "grpc-text":
                return deps[job.model].generate(prompt, params, "grpc", outputs=["text_output"])
            return deps[job.model].generate(prompt, params, job.protocol)
        return job.case.send(ctx.for_model(job.model))
    except Exception as e:  # noqa: BLE001 - a response the client could not read
        t = time.perf_counter()
        return Generation(
            getattr(job, "protocol", "http"),
            t,
            end=t,
            error=f"connection error: unreadable response: {type(e).__name__}: {e}",
        )


def server_health(ctx: "SuiteContext", deps: dict[str, "Deployment"]) -> dict:
    """live, every model of the repository ready, a normal request to each mixed model answered."""
    any_dep = next(iter(deps.values()))
    health = any_dep.server.health()
    out = {
        "live": bool(health.get("http_live")),
        "not_ready": sorted(name for name, info in (health.get("models") or {}).items() if not info["ready"]),
    }
    if health.get("index_error"):
        out["index_error"] = health["index_error"]
    follow = {}
    for model, dep in deps.items():
        gen = dep.generate(ctx.prompts[0].text, GenerateParams(max_tokens=4), "http")
        follow[model] = None if gen.ok and gen.text else (gen.error or "empty text")
    out["follow_up_failed"] = {m: e for m, e in follow.items() if e is not None}
    return out


def problems_of(result: MixResult) -> list[str]:
    """What fails a mix: anything lost, unanswered, crossed or accepted that must be refused, and an unhealthy
    server afterwards. (Diverged answers are reported, not failed, by the load check; the soak asserts them.)"""
    out = []
    g, b = result.good, result.bad
    for count, what, kind in (
        (result.lost, "request(s) lost (still running when the mix gave up waiting)", "lost"),
        (g["no answer"], "good request(s) got no answer (dropped or timed out)", "no answer"),
        (g["error"], "good request(s) refused", "error"),
        (g["mixed"], "good request(s) got another prompt's answer", "mixed"),
        (b["no answer"], "bad request(s) got no clean answer (dropped or timed out)", "bad: no answer"),
        (b["accepted"], "bad request(s) that must be refused were answered", "bad: accepted"),
    ):
        if count:
            first = next(iter(result.examples.get(kind, [])), "")
            out.append(f"{count} {what}" + (f" (first: {first})" if first else ""))
    h = result.health
    if not h.get("live"):
        out.append("the server is not live after the mix")
    if h.get("not_ready"):
        out.append("not ready after the mix: " + ", ".join(h["not_ready"]))
    for model, error in (h.get("follow_up_failed") or {}).items():
        out.append(f"a normal request to {model} after the mix failed: {error}")
    s = result.server
    if s is not None:
        if not s["alive"]:
            out.append(f"the server process {s['pid']} died")
        if s["stubs_died"]:
            out.append("python backend stub(s) died during the mix: " + ", ".join(s["stubs_died"]))
    return out


def mix_models(ctx: "SuiteContext") -> list[str]:
    """The models clients call in the target's repository: the serving model, and the others its contract knows
    (engine: ensemble and tensorrt_llm_bls) that the repository serves."""
    dep = ctx.target
    models = [dep.model]
    others = [m for m in dep.contract.client_models if m != dep.model]
    if others:
        try:
            served = {e.get("name") for e in dep.server.repository_index()}
        except Exception:  # noqa: BLE001 - the index may be restricted: mix the serving model only
            served = set()
        models += [m for m in others if m in served]
    return models
