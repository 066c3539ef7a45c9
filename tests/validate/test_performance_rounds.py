"""The performance check's verdicts under contention: deployments scripted in time (a fake that sleeps per streamed
response), with contention injected into chosen rounds of one side, and the machine-load meter replaced by one that
reports a chosen share. No timing is asserted; only which verdict the check reaches. The rule: min_speedup passes
only when every round reaches it on a quiet machine, fails only when no round does, and is "inconclusive"
otherwise — a shared machine must never turn a slower deployment into a PASS."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

import pytest

from specbuild.methods import describe
from specbuild.recipe.schema import Recipe
from specbuild.validate import machine_load
from specbuild.validate.checks import performance
from specbuild.validate.checks.base import SuiteContext, SuiteOptions
from specbuild.validate.client import ENGINE, Chunk, Contract, Generation
from specbuild.validate.endpoints import Endpoints
from specbuild.recipe.prompts import Prompt

PROMPTS = [Prompt(i, f"p{i}", "code", f"prompt {i}") for i in range(4)]
TOKENS = 8
PER_ROUND = 3
ROUNDS = 4


@dataclass
class TimedDeployment:
    """Streams TOKENS tokens in chunks of `per_chunk`, sleeping `chunk_s` before each chunk; during the requests
    whose round (by request count: PER_ROUND per round at concurrency 1) is in `slow_rounds`, `slowdown` times
    slower — contention that hits this deployment only."""

    label: str
    chunk_s: float
    per_chunk: int
    slow_rounds: set[int] = field(default_factory=set)
    slowdown: float = 5.0
    role: str = "target"
    endpoints: Endpoints = field(default_factory=lambda: Endpoints("127.0.0.1:1"))
    model: str = "ensemble"
    contract: Contract = ENGINE  # its responses carry token ids
    served: int = 0

    def __post_init__(self):
        self.lock = threading.Lock()

    def generate(self, prompt, params, protocol="http", **kw):
        with self.lock:
            n = self.served
            self.served += 1
        # request 0 is the warm-up; then PER_ROUND requests per round
        slow = n > 0 and (n - 1) // PER_ROUND in self.slow_rounds
        delay = self.chunk_s * (self.slowdown if slow else 1.0)
        gen = Generation(protocol, time.perf_counter())
        ids: list[int] = []
        while len(ids) < TOKENS:
            # sleep until this chunk's deadline, so a busy machine's overshoot does not pile up over the baseline's
            # 4x more chunks (which once turned the scripted 0.85x into 1.37x under CI load)
            due = gen.start + delay * (len(gen.chunks) + 1)
            time.sleep(max(0.0, due - time.perf_counter()))
            new = list(range(len(ids), min(len(ids) + self.per_chunk, TOKENS)))
            ids += new
            gen.chunks.append(Chunk(time.perf_counter(), "x" * len(new), new))
        gen.ids, gen.text, gen.final, gen.end = ids, "x" * len(ids), True, time.perf_counter()
        return gen


class QuietMeter:
    """A load meter that reports `share` of the machine taken by other processes."""

    share = 0.0

    def __init__(self, servers=()):
        pass

    def start(self):
        pass

    def stop(self):
        return machine_load.LoadSample(1.0, 2, 0.0, 0.0, self.share)


def context(target, baseline, **validation) -> SuiteContext:
    recipe = Recipe.model_validate(
        {
            "name": "t",
            "model": {"checkpoint": "m"},
            "speculation": {"method": "prompt_lookup"},
            "validation": {"max_tokens": TOKENS, "concurrency": [1], "performance_rounds": ROUNDS, **validation},
        }
    )
    return SuiteContext(
        recipe,
        describe(recipe),
        PROMPTS,
        target,
        baseline,
        None,
        SuiteOptions(requests_per_level=PER_ROUND),
        lambda stage, done, total: None,
    )


def pair(*, speculative_slow=(), baseline_slow=(), speedup=0.85):
    """A speculative deployment `speedup` times as fast as the baseline when nothing interferes (4 tokens per
    streamed response vs 1, as on a real server), and the baseline."""
    base_chunk_s = 0.003
    spec_chunk_s = 4 * base_chunk_s / speedup
    return (
        TimedDeployment("speculative", spec_chunk_s, 4, set(speculative_slow)),
        TimedDeployment("baseline", base_chunk_s, 1, set(baseline_slow), role="baseline"),
    )


def baseline_rounds(rounds: list[int]) -> set[int]:
    """The baseline's own round counter for the check's rounds (it serves once per round)."""
    return set(rounds)


@pytest.fixture(autouse=True)
def quiet_machine(monkeypatch):
    QuietMeter.share = 0.0
    monkeypatch.setattr(performance, "LoadMeter", QuietMeter)


@pytest.mark.parametrize("contended", [[0, 2], [1], [0, 1, 2]], ids=["alternate", "one", "all-but-one"])
def test_contention_in_some_baseline_rounds_never_passes_a_slower_deployment(contended):
    """The truth is 0.85x; contention slows the baseline 5x in some rounds, so those rounds say ~4x. Judged on a
    total or an average that would pass a 1.3x gate; the rounds disagree, so the check does not judge."""
    spec, base = pair(baseline_slow=baseline_rounds(contended))
    result = performance.run(context(spec, base, min_speedup=1.3))
    point = result.details["speedup"][0]
    assert point["speedup_min"] < 1.3 <= point["speedup_max"], point  # the injected contention is visible
    assert result.status == "inconclusive" and not result.ok, result.summary
    assert result.summary.startswith("inconclusive: the rounds disagree")
    assert result.details["gate_verdict"]["status"] == "inconclusive"


def test_steady_contention_on_a_busy_machine_is_not_judged():
    """Every baseline round is slowed (the rounds agree on a false ~4x), but the meter sees other processes taking
    most of the machine: the gate is not judged."""
    spec, base = pair(baseline_slow=set(range(ROUNDS)))
    QuietMeter.share = 0.6
    result = performance.run(context(spec, base, min_speedup=1.3))
    point = result.details["speedup"][0]
    assert point["speedup_min"] >= 1.3, point  # the rounds alone would have passed it
    assert result.status == "inconclusive" and "of this machine's CPU time" in result.summary


def test_allow_inconclusive_lets_the_run_pass_with_the_verdict_shown():
    spec, base = pair(baseline_slow={1})
    result = performance.run(context(spec, base, min_speedup=1.3, allow_inconclusive=True))
    assert result.status == "inconclusive" and result.ok and result.inconclusive_allowed
    assert result.to_dict()["inconclusive_allowed"] is True


def test_a_real_speedup_passes_and_a_real_slowdown_fails_on_a_quiet_machine():
    spec, base = pair(speedup=2.5)
    result = performance.run(context(spec, base, min_speedup=1.3))
    assert result.status == "passed", result.summary
    assert result.details["speedup"][0]["speedup_min"] >= 1.3
    spec, base = pair(speedup=0.5)
    result = performance.run(context(spec, base, min_speedup=1.3))
    assert result.status == "failed" and result.summary.startswith("speedup at concurrency 1 is"), result.summary


def test_a_slower_deployment_warns_without_a_gate_and_the_gate_still_decides():
    """0.5x at concurrency 1: without min_speedup the check warns (the run still passes, and the verdict shows the
    warning); with a gate it is the gate's failure; a 2.5x deployment gets no warning."""
    from specbuild.validate.checks.base import CheckResult
    from specbuild.validate.endpoints import Endpoints as E
    from specbuild.validate.result import ValidationResult

    spec, base = pair(speedup=0.5)
    result = performance.run(context(spec, base))
    assert result.status == "warned" and result.ok, result.summary
    assert result.summary.startswith("slower than the baseline at concurrency 1: speedup 0.")
    assert result.summary.startswith(result.details["slower_than_baseline"])
    run = ValidationResult(
        "t",
        "prompt_lookup",
        "reference",
        E("127.0.0.1:1"),
        None,
        "ensemble",
        [CheckResult("health", "Health", "passed", "ok"), result],
        "now",
        1.0,
        4,
    )
    assert run.passed and [c.name for c in run.warnings] == ["performance"]
    assert run.to_dict()["warnings"] == [f"performance: {result.summary}"]
    spec, base = pair(speedup=0.5)
    gated = performance.run(context(spec, base, min_speedup=0.3))  # a gate below 1 holds: still warned
    assert gated.status == "warned" and "slower than the baseline" in gated.summary
    spec, base = pair(speedup=2.5)
    fast = performance.run(context(spec, base))
    assert fast.status == "passed" and fast.details["slower_than_baseline"] is None


def test_contention_on_the_speculative_side_cannot_fail_a_faster_deployment():
    spec, base = pair(speedup=2.5, speculative_slow={0})
    result = performance.run(context(spec, base, min_speedup=1.3))
    assert result.status == "inconclusive", result.summary


def test_rounds_take_turns_in_abba_order():
    order = []

    class Recorder(TimedDeployment):
        def generate(self, prompt, params, protocol="http", **kw):
            order.append(self.label[0])
            return super().generate(prompt, params, protocol, **kw)

    spec = Recorder("speculative", 0.001, 4)
    base = Recorder("baseline", 0.001, 1, role="baseline")
    result = performance.run(context(spec, base))
    assert "".join(order) == "sb" + "".join(
        ("s" * PER_ROUND + "b" * PER_ROUND) if r % 2 == 0 else ("b" * PER_ROUND + "s" * PER_ROUND)
        for r in range(ROUNDS)
    )
    assert len(result.details["speedup"][0]["rounds"]) == ROUNDS
    assert result.details["levels"]["speculative"][0]["requests"] == ROUNDS * PER_ROUND


def test_the_crossover_uses_the_medians_and_names_uncertain_levels():
    from specbuild.validate.aggregate import Speedup, crossover

    points = [Speedup(1, 0, 0, [1.4, 1.5, 9.0]), Speedup(2, 0, 0, [0.9, 1.2, 0.8]), Speedup(4, 0, 0, [0.5, 0.6])]
    cross = crossover(points)
    assert cross.first_level_below_1 == 2 and cross.uncertain_levels == [2]
    assert points[0].value == 1.5 and (points[0].low, points[0].high) == (1.4, 9.0)


# --- the machine-load meter itself ------------------------------------------------------------------------


@pytest.mark.skipif(not machine_load.STAT.exists(), reason="needs Linux /proc/stat")
def test_the_meter_counts_a_burner_process_as_foreign_and_our_own_work_as_ours():
    meter = machine_load.LoadMeter()
    meter.start()
    cpu0 = time.process_time()
    while time.process_time() - cpu0 < 0.3:  # our own CPU work: never foreign
        pass
    sample = meter.stop()
    assert sample.own_cpu_s >= 0.25
    burner = subprocess.Popen(
        [sys.executable, "-c", "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.6: pass"]
    )
    meter = machine_load.LoadMeter()
    meter.start()
    burner.wait(timeout=60)
    sample = meter.stop()
    # the burner's 0.6 s of CPU is another process's: at least that share of the machine over the interval
    assert sample.busy_cpu_s - sample.own_cpu_s >= 0.5
    assert sample.foreign_share >= 0.5 / (sample.cpus * sample.wall_s) - 0.05
