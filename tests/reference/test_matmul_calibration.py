"""The float32 matmul kernel per weight shape and row count is chosen by measuring (lean/matmul_calibration.py) and
cached per CPU: a kernel faster by more than the margin replaces the fixed rule's, a near tie does not; each shape
keeps one dense layout; a second load reads the cache and measures nothing; a corrupt, foreign or unwritable cache
is measured again, never fatal; the key (and file) changes with the CPU, torch and thread count; the timing loop
interleaves the kernels, keeps each one's fastest call and stays within its budget of calls. Fake measurers and
clocks throughout: nothing here depends on this machine's speed."""

from __future__ import annotations

import json

import pytest
import torch

from specbuild.reference.decoder.lean import linear
from specbuild.reference.decoder.lean import matmul_calibration as mc
from specbuild.reference.decoder.lean.matmul_calibration import COLUMN_MAJOR, PACKED, ROW_MAJOR, ROWS, KernelPlan

KEY = {"format": mc.FORMAT, "cpu": "Test CPU 9000", "flags": "abc", "torch": "x", "threads": 1, "rows": list(ROWS)}
ALL_ROWS = frozenset(ROWS)


def _times(by_rows) -> mc.Times:
    """row count -> (column-major, row-major, packed) microseconds."""
    return {r: dict(zip((COLUMN_MAJOR, ROW_MAJOR, PACKED), by_rows(r))) for r in ROWS}


class FakeMeasure:
    """Times per shape from a table (default: every kernel 100 us at every row count); counts its calls."""

    def __init__(self, table=None):
        self.table = table or {}
        self.calls: list[tuple[int, int]] = []

    def __call__(self, shape):
        self.calls.append(shape)
        return self.table.get(shape) or _times(lambda r: (100.0, 100.0, 100.0))


# row-major 30% faster for 1-2 rows, packed 40% faster from 4 rows; column-major (the default) best at 3
FASTER_ELSEWHERE = _times(
    lambda r: (100.0, 70.0, 130.0) if r <= 2 else (100.0, 110.0, 120.0) if r == 3 else (100.0, 105.0, 60.0)
)


def test_a_shape_where_another_kernel_is_faster_takes_it(tmp_path):
    measure = FakeMeasure({(64, 32): FASTER_ELSEWHERE})
    cal = mc.Calibration(tmp_path / "m.json", KEY, measure)
    plan = cal.plan((64, 32), KernelPlan(COLUMN_MAJOR))
    # one dense layout per shape, the single-row call's: row-major (30% faster there), also at 3 rows where
    # column-major was 10% faster; packed from 4 rows
    assert plan == KernelPlan(ROW_MAJOR, frozenset(r for r in ROWS if r >= 4))
    assert [plan.kernel(n) for n in (1, 2, 3, 4, 5, 6, 7, 100)] == [ROW_MAJOR] * 3 + [PACKED] * 5
    assert measure.calls == [(64, 32)]


def test_a_near_tie_keeps_the_default_and_the_margin_is_what_decides():
    near = _times(lambda r: (100.0, 95.0, 92.0))  # 5-8% faster: within the 10% margin
    assert mc.choose(near, KernelPlan(COLUMN_MAJOR)) == KernelPlan(COLUMN_MAJOR)
    packed_default = KernelPlan(ROW_MAJOR, frozenset(r for r in ROWS if r >= 3))
    assert mc.choose(_times(lambda r: (95.0, 100.0, 100.0)), packed_default) == packed_default
    assert mc.choose(near, KernelPlan(COLUMN_MAJOR), margin=0.05) == KernelPlan(COLUMN_MAJOR, ALL_ROWS)


def test_a_kernel_that_won_the_row_count_below_keeps_a_near_tie():
    # packed wins at 3 rows; from 4 rows row-major is 3% faster than packed, both far ahead of column-major
    times = _times(lambda r: (100.0, 100.0, 100.0) if r < 3 else (100.0, 75.0, 60.0) if r == 3 else (100.0, 67.0, 69.0))
    assert mc.choose(times, KernelPlan(COLUMN_MAJOR)) == KernelPlan(COLUMN_MAJOR, frozenset(r for r in ROWS if r >= 3))


def test_the_single_row_call_picks_the_dense_layout():
    # row-major is 30% faster at 2-3 rows, but within the margin at one row (the decode step): column-major stays,
    # and the 2-3 row calls take the faster of column-major and packed
    times = _times(lambda r: (100.0, 95.0, 150.0) if r == 1 else (100.0, 70.0, 90.0) if r <= 3 else (100.0, 90.0, 60.0))
    assert mc.choose(times, KernelPlan(COLUMN_MAJOR)) == KernelPlan(COLUMN_MAJOR, frozenset(r for r in ROWS if r >= 2))
    # where packed wins one row too, the dense layout that loses least elsewhere (row-major at 2-3 rows here)
    times = _times(lambda r: (100.0, 95.0, 50.0) if r == 1 else (100.0, 50.0, 90.0) if r <= 3 else (100.0, 90.0, 60.0))
    assert mc.choose(times, KernelPlan(COLUMN_MAJOR)) == KernelPlan(
        ROW_MAJOR, frozenset({1, *(r for r in ROWS if r >= 4)})
    )


def test_without_a_packed_kernel_the_dense_layouts_decide():
    times = {r: {COLUMN_MAJOR: 100.0, ROW_MAJOR: 50.0} for r in ROWS}  # no oneDNN: no packed time
    assert mc.choose(times, KernelPlan(ROW_MAJOR, frozenset({8, 16, 32}))) == KernelPlan(ROW_MAJOR)
    times = {r: {COLUMN_MAJOR: 50.0, ROW_MAJOR: 100.0} for r in ROWS}
    assert mc.choose(times, KernelPlan(ROW_MAJOR, frozenset({8, 16, 32}))) == KernelPlan(COLUMN_MAJOR)


def test_the_second_load_reads_the_cache_and_measures_nothing(tmp_path):
    path = tmp_path / "matmul" / "cpu.json"
    first = FakeMeasure({(64, 32): FASTER_ELSEWHERE})
    cal = mc.Calibration(path, KEY, first)
    plans = {s: cal.plan(s, KernelPlan(COLUMN_MAJOR)) for s in [(64, 32), (32, 64), (64, 32), (32, 64)]}
    assert first.calls == [(64, 32), (32, 64)] and cal.measured == 2  # once per shape in a process

    second = FakeMeasure()  # a new process: another Calibration over the same file
    again = mc.Calibration(path, KEY, second)
    assert {s: again.plan(s, KernelPlan(COLUMN_MAJOR)) for s in plans} == plans
    assert second.calls == [] and again.measured == 0
    again.plan((16, 16), KernelPlan(COLUMN_MAJOR))  # a shape not cached yet: measured, added beside the others
    assert second.calls == [(16, 16)]
    stored = json.loads(path.read_text())
    assert stored["key"] == KEY and sorted(stored["shapes"]) == ["16x16", "32x64", "64x32"]
    assert stored["shapes"]["64x32"]["1"] == {COLUMN_MAJOR: 100.0, ROW_MAJOR: 70.0, PACKED: 130.0}
    assert not [p for p in path.parent.iterdir() if ".partial-" in p.name]  # written atomically, nothing left


@pytest.mark.parametrize(
    "content",
    [
        "{not json",
        "",
        json.dumps({"key": KEY, "shapes": {"64x32": {"1": {COLUMN_MAJOR: 1.0}}}}),  # rows and a kernel missing
        json.dumps({"key": KEY, "shapes": {"64x32": {str(r): {COLUMN_MAJOR: -1, ROW_MAJOR: 1} for r in ROWS}}}),
        json.dumps({"key": KEY, "shapes": ["64x32"]}),
        json.dumps([1, 2]),
        json.dumps({"key": {**KEY, "cpu": "another"}, "shapes": {"64x32": FASTER_ELSEWHERE}}),  # another CPU's
    ],
    ids=["truncated", "empty", "incomplete", "negative", "list-of-shapes", "not-an-object", "foreign-key"],
)
def test_a_corrupt_or_foreign_cache_file_is_measured_again(tmp_path, content):
    path = tmp_path / "cpu.json"
    path.write_text(content)
    measure = FakeMeasure({(64, 32): FASTER_ELSEWHERE})
    plan = mc.Calibration(path, KEY, measure).plan((64, 32), KernelPlan(COLUMN_MAJOR))
    assert measure.calls == [(64, 32)] and plan.dense == ROW_MAJOR
    assert sorted(json.loads(path.read_text())["shapes"]) == ["64x32"]  # rewritten whole and valid
    fresh = FakeMeasure()
    mc.Calibration(path, KEY, fresh).plan((64, 32), KernelPlan(COLUMN_MAJOR))
    assert fresh.calls == []


def test_a_cache_that_cannot_be_written_is_not_fatal(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("a file where the cache folder should be")
    measure = FakeMeasure({(64, 32): FASTER_ELSEWHERE})
    cal = mc.Calibration(blocker / "matmul" / "cpu.json", KEY, measure)
    assert cal.plan((64, 32), KernelPlan(COLUMN_MAJOR)).dense == ROW_MAJOR
    assert (
        cal.plan((64, 32), KernelPlan(COLUMN_MAJOR)).dense == ROW_MAJOR and len(measure.calls) == 1
    )  # kept in process


def test_the_cache_key_and_file_change_with_the_cpu_torch_and_threads(monkeypatch, tmp_path):
    def key(name="AMD EPYC 7B13 64-Core Processor", flags="fpu avx2 fma", version="2.13.0", threads=1, isa=None):
        with monkeypatch.context() as m:
            m.setattr(mc.cpu, "model_name", lambda: name)
            m.setattr(mc.cpu, "flags", lambda: flags)
            m.setattr(mc.torch, "__version__", version)
            m.setattr(mc.torch, "get_num_threads", lambda: threads)
            if isa:
                m.setenv("ONEDNN_MAX_CPU_ISA", isa)
            else:
                m.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
            return mc.cpu_key()

    path = mc.cache_file(tmp_path, key())
    assert path.parent == tmp_path / "matmul" and path.name.startswith("amd-epyc-7b13-64-core-processor-")
    assert mc.cache_file(tmp_path, key()) == path  # stable
    others = [
        key(name="AMD EPYC 9B14 96-Core Processor"),
        key(flags="fpu avx2 fma avx512f"),
        key(version="2.14.0"),
        key(threads=4),
        key(isa="AVX2"),
    ]
    assert len({path, *(mc.cache_file(tmp_path, k) for k in others)}) == 1 + len(others)

    # the process-wide Calibration follows the key: another CPU reads another file
    monkeypatch.setenv("SPECBUILD_CACHE_DIR", str(tmp_path))
    here = mc.calibration()
    assert here is mc.calibration() and here.path == mc.cache_file(tmp_path, mc.cpu_key())
    monkeypatch.setattr(mc.cpu, "model_name", lambda: "Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz")
    assert mc.calibration().path not in (here.path, None)


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_time_kernels_interleaves_keeps_the_fastest_call_and_is_bounded():
    clock, order = FakeClock(), []
    spikes = {("b", 3)}  # the machine was busy during b's third timed round: that round is ignored, not averaged

    def kernel(name, cost):
        def run(i):
            order.append((name, i))
            rounds_done = sum(1 for n, j in order if n == name and j == 0) - 1  # -1: the untimed pass
            clock.now += cost + (1.0 if (name, rounds_done) in spikes else 0.0)

        return run

    times = mc.time_kernels(
        {"a": kernel("a", 10e-6), "b": kernel("b", 8e-6), "c": kernel("c", 12e-6)},
        copies=2,
        rounds=5,
        budget_s=1.0,
        clock=clock,
    )
    assert times == pytest.approx({"a": 10.0, "b": 8.0, "c": 12.0})
    assert len(order) == 3 * 2 * (1 + 5)  # an untimed pass, then `rounds` rounds: every kernel over every copy
    firsts = [n for n, i in order[6:] if i == 0]
    assert firsts == ["a", "b", "c", "b", "c", "a", "c", "a", "b", "a", "b", "c", "b", "c", "a"]  # rotated

    order.clear()  # a slow kernel: the first round's length cuts the rounds to the minimum
    mc.time_kernels({"slow": kernel("slow", 0.5)}, copies=1, rounds=7, min_rounds=3, budget_s=0.1, clock=clock)
    assert len(order) == 1 + 3


def test_measure_shape_times_each_kernel_at_every_row_count(monkeypatch):
    calls = []
    real = mc.time_kernels
    monkeypatch.setattr(
        mc, "time_kernels", lambda kernels, copies, **kw: calls.append(copies) or real(kernels, copies, rounds=3, **kw)
    )
    times = mc.measure_shape((24, 40))
    assert sorted(times) == list(ROWS) and len(calls) == len(ROWS)
    want = {COLUMN_MAJOR, ROW_MAJOR} | ({PACKED} if mc._packed(torch.ones(2, 2)) is not None else set())
    assert all(set(cell) == want and all(v > 0 for v in cell.values()) for cell in times.values())
    assert calls[0] == mc.MAX_COPIES  # a small matrix: the most copies, cycled


@pytest.mark.parametrize(
    "plan",
    [
        KernelPlan(COLUMN_MAJOR),
        KernelPlan(ROW_MAJOR),
        KernelPlan(ROW_MAJOR, frozenset({2, 6, 32})),
        KernelPlan(COLUMN_MAJOR, frozenset(r for r in ROWS if r >= 4)),
        KernelPlan(COLUMN_MAJOR, ALL_ROWS),
    ],
    ids=lambda p: p.describe(),
)
def test_linear_under_any_plan_computes_the_matmul_and_takes_the_planned_kernel(monkeypatch, plan):
    monkeypatch.setattr(linear, "float32_plan", lambda shape: plan)
    torch.manual_seed(0)
    weight, bias = torch.nn.Parameter(torch.randn(40, 24)), torch.randn(40)
    want_weight = weight.detach().clone()
    lin = linear.Linear(weight, bias)
    assert lin.weight is weight and torch.equal(weight, want_weight)  # relaid in place, same values
    assert weight.t().is_contiguous() if plan.dense == COLUMN_MAJOR else weight.is_contiguous()
    packed_calls = []
    real = torch.ops.mkldnn._linear_pointwise
    monkeypatch.setattr(torch.ops.mkldnn, "_linear_pointwise", lambda *a: packed_calls.append(a[0].shape) or real(*a))
    for rows in range(1, 41):
        x = torch.randn(1, rows, 24)
        got = lin(x)
        assert torch.allclose(got, x @ want_weight.T + bias, atol=1e-5, rtol=1e-5), rows
    packed_rows = [shape[1] for shape in packed_calls]
    if lin.packed is not None:
        assert packed_rows == [n for n in range(1, 41) if plan.kernel(n) == PACKED]
    else:  # no oneDNN in this torch: every call dense
        assert packed_rows == []


def test_the_environment_variable_picks_a_fixed_rule_and_measures_nothing(monkeypatch):
    measure = FakeMeasure({(64, 32): FASTER_ELSEWHERE})
    monkeypatch.setattr(mc, "calibration", lambda: mc.Calibration(None, KEY, measure))
    try:
        monkeypatch.delenv(linear.MATMUL_ENV, raising=False)
        linear.matmul_rule.cache_clear()
        assert linear.matmul_rule() == linear.MEASURED
        monkeypatch.setattr(linear, "default_rule", lambda: COLUMN_MAJOR)
        assert linear.float32_plan((64, 32)) == KernelPlan(ROW_MAJOR, frozenset(r for r in ROWS if r >= 4))
        assert measure.calls == [(64, 32)]
        for rule, want in ((COLUMN_MAJOR, KernelPlan(COLUMN_MAJOR)), (PACKED, KernelPlan(COLUMN_MAJOR))):
            monkeypatch.setenv(linear.MATMUL_ENV, rule)
            linear.matmul_rule.cache_clear()
            assert linear.float32_plan((64, 32)) == want  # 2048 weights: below PACK_MIN_WEIGHTS, no packed copy
        assert measure.calls == [(64, 32)]
    finally:
        linear.matmul_rule.cache_clear()
