"""What every check shares: its result, the deployments it talks to, and the suite's context."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Callable, Protocol, Sequence

from specbuild.standalone.draft_len_schedule import draft_length
from specbuild.validate.client import (
    ENGINE,
    Contract,
    Generation,
    GenerateParams,
    GrpcSession,
    HttpSession,
    ModelSignature,
    ServerClient,
    new_request_id,
)
from specbuild.validate.endpoints import Endpoints
from specbuild.validate.server_metrics import scrape

if TYPE_CHECKING:
    from specbuild.runtimes.base import Runtime
    from specbuild.speculation import Speculation
    from specbuild.recipe.schema import Recipe
    from specbuild.recipe.prompts import Prompt, PromptFormat
    from specbuild.checkpoints.client_tokenizer import ClientTokenizer

PASSED, FAILED, WARNED, SKIPPED, ERROR = "passed", "failed", "warned", "skipped", "error"
INCONCLUSIVE = "inconclusive"  # a gate the measurements cannot decide (e.g. a sweep on a loaded machine)


class ProgressFn(Protocol):
    """Progress of the suite: `stage` names what runs now; done/total count its steps (total 0: unknown)."""

    def __call__(self, stage: str, done: int, total: int) -> None: ...


@dataclass
class CheckResult:
    """The outcome of one check. `passed`, `warned` (a finding that is no gate) and `skipped` do not fail a run;
    `failed` (a gate does not hold) and `error` (the check could not run) do. `inconclusive` (the measurements
    cannot decide the gate) fails a run unless the recipe allows it (`validation.allow_inconclusive`:
    `inconclusive_allowed`)."""

    name: str
    title: str
    status: str
    summary: str
    details: dict[str, Any] = field(default_factory=dict)
    gate: str | None = None  # the recipe gate this check decides, e.g. "validation.min_speedup >= 1.3"
    duration_s: float = 0.0
    inconclusive_allowed: bool = False

    @property
    def ok(self) -> bool:
        return self.status in (PASSED, WARNED, SKIPPED) or (self.status == INCONCLUSIVE and self.inconclusive_allowed)

    def to_dict(self) -> dict:
        d = {
            "name": self.name,
            "title": self.title,
            "status": self.status,
            "summary": self.summary,
            "gate": self.gate,
            "duration_s": round(self.duration_s, 3),
            "details": self.details,
        }
        if self.status == INCONCLUSIVE:
            d["inconclusive_allowed"] = self.inconclusive_allowed
        return d


@dataclass
class SuiteOptions:
    """Knobs beyond the recipe (compile and tests use them to keep runs short). None: the recipe's value or the
    suite's default."""

    checks: Sequence[str] | None = None  # run only these checks (names from specbuild.validate.checks.order.ORDER)
    requests_per_level: int | None = None  # performance: requests per deployment per round of a level
    performance_rounds: int | None = None  # performance: rounds per level (default validation.performance_rounds)
    perf_max_tokens: int | None = None  # performance: tokens per request (default validation.max_tokens)
    load_seconds: float | None = None
    load_clients: int | None = None
    sampling_trials: int | None = None
    parallel: int = 2  # requests in flight during the prompt-set passes
    max_prompts: int | None = None  # use only the first N prompts


class Deployment:
    """One served deployment: the speculative one (`role` target) or the baseline, and the request/response
    contract its serving model speaks (`Runtime.contract`: engine or llm-api)."""

    def __init__(
        self,
        role: str,
        endpoints: Endpoints,
        model: str,
        timeout_s: float,
        speculative: bool = True,
        contract: Contract = ENGINE,
    ):
        self.role = role
        self.contract = contract
        self.label = "baseline" if role != "target" else "speculative" if speculative else "target"
        self.endpoints = endpoints
        self.model = endpoints.model or model
        self.timeout_s = timeout_s
        self.server = ServerClient(endpoints.http, endpoints.grpc, timeout_s=min(timeout_s, 60.0))
        self._local = threading.local()
        self._sessions: list[Any] = []
        self._others: dict[str, Deployment] = {}
        self._lock = threading.Lock()

    # per-thread connections ---------------------------------------------------------------------------------
    def http(self) -> HttpSession:
        s = getattr(self._local, "http", None)
        if s is None:
            s = self._local.http = HttpSession(self.endpoints.http, self.timeout_s, self.contract)
            with self._lock:
                self._sessions.append(s)
        return s

    def grpc(self) -> GrpcSession | None:
        if not self.endpoints.grpc:
            return None
        s = getattr(self._local, "grpc", None)
        if s is None:
            s = self._local.grpc = GrpcSession(self.endpoints.grpc, self.timeout_s, self.contract)
            with self._lock:
                self._sessions.append(s)
        return s

    def drop_grpc(self) -> None:
        """Close this thread's gRPC session (after a cancelled stream) so the next call opens a fresh one."""
        s = getattr(self._local, "grpc", None)
        if s is not None:
            s.close()
            self._local.grpc = None

    def close(self) -> None:
        with self._lock:
            for s in self._sessions:
                s.close()
            self._sessions.clear()
            others, self._others = list(self._others.values()), {}
        for other in others:
            other.close()
        self.server.close()

    def with_model(self, model: str) -> "Deployment":
        """The same deployment, calling another of its models (e.g. the BLS next to the ensemble); closed with
        this one."""
        if model == self.model:
            return self
        with self._lock:
            other = self._others.get(model)
            if other is None:
                other = Deployment(
                    self.role, replace(self.endpoints, model=model), model, self.timeout_s, contract=self.contract
                )
                other.label = self.label
                self._others[model] = other
        return other

    @property
    def signature(self) -> ModelSignature:
        return self.server.signature(self.model)

    @property
    def streams(self) -> bool:
        """The serving model is decoupled: it can send one response per step."""
        return self.signature.decoupled

    # generation ---------------------------------------------------------------------------------------------
    def generate(
        self,
        prompt: str | bytes,
        params: GenerateParams,
        protocol: str = "http",
        *,
        stop_after: int | None = None,
        model: str | None = None,
        outputs: list[str] | None = None,
    ) -> Generation:
        """protocol: http (/generate), http-stream (/generate_stream), grpc (gRPC stream; `outputs`: ask for
        these outputs only)."""
        model = model or self.model
        rid = new_request_id(self.label[:4])
        if protocol == "http":
            return self.http().generate(
                model, prompt if isinstance(prompt, str) else prompt.decode(errors="replace"), params, request_id=rid
            )
        stream = self.streams
        if protocol == "http-stream":
            text = prompt if isinstance(prompt, str) else prompt.decode(errors="replace")
            return self.http().generate_stream(
                model, text, params, request_id=rid, stop_after=stop_after, stream_flag=stream
            )
        if protocol == "grpc":
            session = self.grpc()
            if session is None:
                raise ValueError("no gRPC endpoint")
            sig = self.signature if model == self.model else self.server.signature(model)
            # gRPC refuses inputs a model does not declare (older repositories lack some): send only declared ones
            values = {
                k: v
                for k, v in self.contract.inputs(params, prompt, stream=stream).items()
                if k in sig.inputs or k in params.extra
            }
            gen = session.generate(model, sig, values, request_id=rid, stop_after=stop_after, outputs=outputs)
            if not gen.ok:
                self.drop_grpc()
            return gen
        raise ValueError(f"unknown protocol {protocol!r}")


@dataclass
class SuiteContext:
    """Everything a check needs. Greedy passes over the prompt set are cached: several checks read them."""

    recipe: Recipe
    spec: Speculation  # the recipe's speculation (specbuild.methods.describe)
    prompts: list[Prompt]
    target: Deployment
    baseline: Deployment | None
    tokenizer: ClientTokenizer | None
    options: SuiteOptions
    progress: Callable[[str, int, int], None]
    _greedy: dict[tuple[str, str, str], list[Generation]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    # the target's metrics endpoint scraped just before and after its greedy HTTP pass (the requests the
    # acceptance check reads): (before, after) samples, or an error sentence
    server_scrapes: tuple | str | None = None
    tokenizer_problem: str | None = None  # why there is no tokenizer (what needs it says so)
    prompt_format: PromptFormat | None = None  # how the prompts are sent (validation.prompt_format)
    prompts_left_out: list = field(default_factory=list)  # LeftOut: prompts of the set not sent, and why
    prompt_tokens: dict[str, int] = field(default_factory=dict)  # prompt id -> its length as sent (tokens)
    prompts_ignored: str | None = None  # the record keys no prompt format defines, not read (prompts.ignored_note)
    # the results of the checks run so far, by name (a check may read an earlier one's figures)
    finished: dict[str, CheckResult] = field(default_factory=dict)
    runtime: Runtime | None = None  # the recipe's runtime (specbuild.runtimes.build), for the checks that ask it

    @property
    def max_tokens(self) -> int:
        return self.recipe.validation.max_tokens

    def for_model(self, model: str) -> "SuiteContext":
        """This context with the target calling `model` (a check's cases then go to that model)."""
        if model == self.target.model:
            return self
        return replace(self, target=self.target.with_model(model))

    def deployments(self) -> list[Deployment]:
        return [self.target] + ([self.baseline] if self.baseline is not None else [])

    def count_tokens(self, gen: Generation) -> int | None:
        """Output tokens of a successful generation: the server's ids, else the tokenizer's count of the text."""
        if gen.num_tokens is not None:
            return gen.num_tokens
        if self.tokenizer is not None and gen.ok:
            return len(self.tokenizer.encode(gen.text))
        return None

    def chunk_tokens(self, gen: Generation) -> list[int] | None:
        """Tokens per streamed response of a generation without ids: the tokenizer's count of the text so far,
        response by response (None when there are ids, or no tokenizer)."""
        if self.tokenizer is None or not gen.ok or any(c.ids is not None for c in gen.chunks):
            return None
        counts, text, before = [], "", 0
        for c in gen.chunks:
            text += c.text
            now = len(self.tokenizer.encode(text))
            counts.append(max(0, now - before))
            before = max(before, now)
        return counts

    def greedy_params(self, **kw) -> GenerateParams:
        return GenerateParams(max_tokens=kw.pop("max_tokens", self.max_tokens), **kw)

    def run_many(self, stage: str, jobs: list[Callable[[], Any]], parallel: int | None = None) -> list[Any]:
        """Run jobs with a few in flight, reporting progress; results in job order."""
        total = len(jobs)
        done = 0
        self.progress(stage, 0, total)
        results: list[Any] = [None] * total
        lock = threading.Lock()

        def run(i: int) -> None:
            nonlocal done
            results[i] = jobs[i]()
            with lock:
                done += 1
                self.progress(stage, done, total)

        pool = ThreadPoolExecutor(max_workers=max(1, parallel or self.options.parallel))
        try:
            list(pool.map(run, range(total)))
        except BaseException:  # Ctrl-C / SIGTERM: drop the queued jobs instead of running them all first
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        pool.shutdown()
        return results

    def greedy_pass(self, deployment: Deployment, protocol: str = "http") -> list[Generation]:
        """The greedy output of every prompt (exclude_input_in_output, perf metrics on), computed once."""
        key = (deployment.role, getattr(deployment, "model", ""), protocol)  # for_model contexts share the cache
        with self._lock:
            cached = self._greedy.get(key)
        if cached is not None:
            return cached
        params = self.greedy_params()
        jobs = [lambda p=p: deployment.generate(p.text, params, protocol) for p in self.prompts]
        scraped = deployment is self.target and protocol == "http" and deployment.endpoints.metrics
        before = self._scrape(deployment) if scraped else None
        gens = self.run_many(f"greedy prompt set: {deployment.label}, {protocol}", jobs, self.full_draft_parallel())
        if scraped:
            after = self._scrape(deployment)
            errors = [x for x in (before, after) if isinstance(x, str)]
            self.server_scrapes = errors[0] if errors else (before, after)
        with self._lock:
            self._greedy[key] = gens
        return gens

    def full_draft_parallel(self) -> int:
        """Requests in flight during the prompt-set passes: options.parallel, or fewer where an adaptive
        draft_len_schedule would shorten the drafts (acceptance is judged at the full draft length)."""
        points = self.spec.draft_len_schedule
        n = max(1, self.options.parallel)
        while points and n > 1 and draft_length(list(points), n) < points[0][1]:
            n -= 1
        return n

    @staticmethod
    def _scrape(deployment: Deployment):
        try:
            return scrape(deployment.endpoints.metrics, timeout_s=min(deployment.timeout_s, 30.0))
        except OSError as e:
            return str(e)


def timed(fn: Callable[[SuiteContext], CheckResult]) -> Callable[[SuiteContext], CheckResult]:
    """Wrap a check: measure its duration, turn an unexpected exception into an `error` result."""

    def run(ctx: SuiteContext) -> CheckResult:
        t0 = time.perf_counter()
        try:
            result = fn(ctx)
        except Exception as e:  # noqa: BLE001 - a check that cannot run is reported, not raised
            name = getattr(fn, "__module__", "check").rsplit(".", 1)[-1]
            result = CheckResult(name, name, ERROR, f"the check could not run: {type(e).__name__}: {e}")
        result.duration_s = time.perf_counter() - t0
        return result

    run.__name__ = fn.__name__
    return run


def first_difference(a: Sequence[Any], b: Sequence[Any]) -> int | None:
    """Index of the first position where two sequences differ (the shorter one's length if one is a prefix);
    None when they are equal."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))
