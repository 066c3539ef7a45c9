"""Per-call costs of real decoding on the reference runtime, for the cost model (specbuild/facts/cost_model.py).

`CallTimer(method)` puts timers around a method's `step`, the target's forwards inside it and the step's drafting
call (`Decoder.drafting`), on the instances only (nothing else changes, outputs stay identical), until `remove()`.
`measure_levels` decodes the same prompts with a speculative engine and its baseline at each concurrency level,
taking turns, and returns one `LevelModel` per level: t(1), t(verify), t(draft), AL and the in-process speedup.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from specbuild.facts.cost_model import LevelModel, StepCosts
from specbuild.facts.engine_facts import SpecMode, read_engine_config
from specbuild.reference.dialect import overrides
from specbuild.reference.engine_folder import load_engine
from specbuild.standalone.model_parameters import bool_parameter, int_parameter, parameter

if TYPE_CHECKING:
    from specbuild.reference.decoder.engine import Engine
    from specbuild.reference.decoder.executor import Executor
    from specbuild.reference.decoder.methods import Decoder


@dataclass
class _Step:
    rows: int
    seconds: float = 0.0
    target_s: float = 0.0
    draft_s: float = 0.0
    accepted: int = 0
    verifications: int = 0


class CallTimer:
    """Timers around one method's steps, the target forwards inside them (outside drafting) and its drafting call."""

    def __init__(self, method: Decoder):
        self.method = method
        self.steps: list[_Step] = []
        self._current: _Step | None = None
        self._drafting = False
        self._patched: list[tuple[object, str]] = []
        self._patch(method, "step", self._timed_step)
        self._patch(method.target, "forward", self._timed_forward)
        if method.drafting is not None:
            self._patch(method, method.drafting, self._timed_drafting)

    def _patch(self, obj: object, name: str, wrap: Callable) -> None:
        if name in vars(obj):
            raise RuntimeError(f"{type(obj).__name__}.{name} is already replaced on this instance (another timer?)")
        inner = getattr(obj, name)
        setattr(obj, name, lambda *a, **kw: wrap(inner, *a, **kw))
        self._patched.append((obj, name))

    def remove(self) -> None:
        for obj, name in self._patched:
            vars(obj).pop(name, None)
        self._patched = []

    def _timed_step(self, inner, batch, *args, **kw):
        self._current = step = _Step(rows=len(batch.seqs))
        start = time.perf_counter()
        try:
            outputs = inner(batch, *args, **kw)
        finally:
            step.seconds = time.perf_counter() - start
            self._current = None
        step.accepted = sum(o.accepted for o in outputs if o.counts_as_step)
        step.verifications = sum(1 for o in outputs if o.counts_as_step)
        self.steps.append(step)
        return outputs

    def _timed_forward(self, inner, *args, **kw):
        step = self._current
        if step is None or self._drafting:
            return inner(*args, **kw)
        start = time.perf_counter()
        try:
            return inner(*args, **kw)
        finally:
            step.target_s += time.perf_counter() - start

    def _timed_drafting(self, inner, *args, **kw):
        step = self._current
        if step is None or self._drafting:
            return inner(*args, **kw)
        self._drafting = True
        start = time.perf_counter()
        try:
            return inner(*args, **kw)
        finally:
            step.draft_s += time.perf_counter() - start
            self._drafting = False

    def costs(self, rows: int | None = None) -> StepCosts:
        """Mean costs of the timed steps; with `rows`, of the steps that decoded that many requests (all steps when
        none did)."""
        steps = [s for s in self.steps if rows is None or s.rows == rows] or self.steps
        if not steps:
            return StepCosts(0, 0.0, 0.0, 0.0, 0.0)
        n = len(steps)
        return StepCosts(
            steps=n,
            rows=sum(s.rows for s in steps) / n,
            step_ms=1e3 * sum(s.seconds for s in steps) / n,
            target_ms=1e3 * sum(s.target_s for s in steps) / n,
            draft_ms=1e3 * sum(s.draft_s for s in steps) / n,
            accepted=sum(s.accepted for s in steps),
            verifications=sum(s.verifications for s in steps),
        )


def engine_method(executor: Executor) -> Decoder:
    """The method an Executor decodes its (non-external-draft) requests with."""
    return executor._groups["engine"].method


def measure_levels(
    engine: Engine,
    baseline: Engine,
    draft: Engine | None,
    prompts: list[list[int]],
    max_tokens: int,
    levels: list[int],
    rounds: int = 2,
    kv_cache_reuse: bool = False,
    progress: Callable[[str], None] | None = None,
) -> list[LevelModel]:
    """At each level c: max(c, 2) of the prompts decoded greedily (exactly `max_tokens` tokens each, no end id) by
    the speculative engine and by the baseline engine, at most c together, taking turns for `rounds` rounds (ABBA);
    the costs of the steps that decoded c requests, and the in-process speedup (median over rounds of baseline time /
    speculative time). `kv_cache_reuse`: both Executors keep finished requests' KV (as a served core does with
    enable_kv_cache_reuse)."""
    import torch

    from specbuild.reference.decoder.executor import Executor, Request

    out = []
    for c in levels:
        if progress:
            progress(f"per-call costs at concurrency {c}")
        n = max(c, min(2, len(prompts)))
        requests = [prompts[i % len(prompts)] for i in range(n)]
        runs = {
            "method": Executor(engine, draft, enable_kv_cache_reuse=kv_cache_reuse),
            "baseline": Executor(baseline, enable_kv_cache_reuse=kv_cache_reuse),
        }
        timers = {}
        seconds: dict[str, list[float]] = {"method": [], "baseline": []}
        try:
            for name, ex in runs.items():
                ex.limits = _with_batch(ex.limits, c)
                timers[name] = CallTimer(engine_method(ex))
            with torch.inference_mode():
                for r in range(rounds):
                    order = ["method", "baseline"] if r % 2 == 0 else ["baseline", "method"]
                    for name in order:
                        start = time.perf_counter()
                        runs[name].run([Request(input_ids=list(p), max_new_tokens=max_tokens) for p in requests])
                        seconds[name].append(time.perf_counter() - start)
        finally:
            for timer in timers.values():
                timer.remove()
        speedup = statistics.median(b / m for b, m in zip(seconds["baseline"], seconds["method"]))
        out.append(LevelModel(c, timers["baseline"].costs(c), timers["method"].costs(c), in_process=speedup))
    return out


def _with_batch(limits, c: int):
    from dataclasses import replace

    return replace(limits, max_batch_size=c)


def measure_served(
    configs: dict[str, dict],
    texts: list[str],
    max_tokens: int,
    levels: list[int],
    progress: Callable[[str], None] | None = None,
) -> list[LevelModel]:
    """`measure_levels` for served reference cores on this machine: `configs` are the `tensorrt_llm` model configs
    of the speculative and the baseline deployment ("target", "baseline") and the speculative one's
    `tensorrt_llm_draft` ("draft", when served), as the server reports them. Each engine is loaded as its core loads
    it (the config's decoding parameters as overrides; KV reuse as the target core's enable_kv_cache_reuse, default
    true); the prompts are tokenized as the preprocessing model does. One torch thread, as the core runs by
    default."""
    import torch
    from transformers import AutoTokenizer

    engines = {
        role: load_engine(_engine_dir(config), decoding_overrides=_overrides(config) or None)
        for role, config in configs.items()
    }
    tokenizer = AutoTokenizer.from_pretrained(parameter(configs["target"], "tokenizer_dir"), legacy=False)
    prompts = [tokenizer.encode(t, add_special_tokens=True) for t in texts]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return measure_levels(
            engines["target"],
            engines["baseline"],
            engines.get("draft"),
            prompts,
            max_tokens,
            levels,
            kv_cache_reuse=bool_parameter(configs["target"], "enable_kv_cache_reuse", True),
            progress=progress,
        )
    finally:
        torch.set_num_threads(threads)


def _engine_dir(config: dict) -> str:
    return parameter(config, "gpt_model_path")


def _overrides(config: dict) -> dict:
    """The decoding overrides the reference core takes from its config's parameters (its `decoding_overrides`)."""
    engine_config = read_engine_config(_engine_dir(config))
    mode = SpecMode.parse(engine_config["build_config"].get("speculative_decoding_mode", 1))
    method = (engine_config.get("specbuild") or {}).get("method", "none")
    return overrides(
        lambda key: parameter(config, key),
        lambda key: bool_parameter(config, key, None),
        lambda key: int_parameter(config, key),
        mode,
        method,
    )
