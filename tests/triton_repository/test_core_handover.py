"""The reference core's two threads (reference/core_models/engine/model.py): the executor thread records each step and
builds its responses; it hands them to the delivery thread (which sends them) only for a step with something to
send — a finished row, a streamed response that is due (streams_now) — or at the metrics' period, or when the
executor goes idle. Every response still goes out, in order, FINAL last. The model's `loop` and `deliver_loop`
run here over a scripted executor, with a stand-in for triton_python_backend_utils; so does the llm-api flavour's
core (reference/core_models/llm_api/model.py) for the CPUs its executor thread takes."""

from __future__ import annotations

import importlib.util
import os
import queue
import sys
import threading
import time
import types

import pytest
from repo_helpers import ROOT

from specbuild.reference.decoder.request import Event, RequestStats, streams_now

CORE_MODELS = ROOT / "pipeline" / "specbuild" / "reference" / "core_models"
STANDALONE = ROOT / "pipeline" / "specbuild" / "standalone"  # the modules copied beside every core
FINAL = 1


class _Tensor:
    def __init__(self, name, array):
        self._name, self.array = name, array

    def name(self):
        return self._name


def _load_core(folder: str, module_name: str):
    """A core model.py, imported with a stand-in for triton_python_backend_utils (yields the module)."""
    pb = types.ModuleType("triton_python_backend_utils")
    pb.Tensor = _Tensor
    pb.InferenceResponse = lambda output_tensors=(), error=None: (
        {"error": error} if error is not None else {t.name(): t.array for t in output_tensors}
    )
    pb.TritonError = str
    pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL = FINAL
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(sys.modules, "triton_python_backend_utils", pb)
        mp.syspath_prepend(str(STANDALONE))
        spec = importlib.util.spec_from_file_location(module_name, CORE_MODELS / folder / "model.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        yield module


@pytest.fixture(scope="module")
def core():
    yield from _load_core("engine", "reference_core_model")


@pytest.fixture(scope="module")
def llmapi_core():
    yield from _load_core("llm_api", "llmapi_reference_core_model")


class _Request:
    def request_id(self):
        return ""

    def requested_output_names(self):
        return ["output_ids"]


class _Sender:
    def __init__(self):
        self.sent = []  # (output_ids as a list, or None for a flags-only response; flags)
        self.done = threading.Event()

    def send(self, response=None, flags=0):
        if response is not None and "error" in response:
            self.sent.append((response["error"], flags))
        else:
            self.sent.append((None if response is None else response["output_ids"].ravel().tolist(), flags))
        if flags & FINAL:
            self.done.set()


class _ScriptedExecutor:
    """steps[i]: the request ids that took part in step i; each gets token 100 * i + rid and finishes at its last."""

    def __init__(self, steps: list[list[int]]):
        self.steps = steps
        self.last = {rid: i for i, rids in enumerate(steps) for rid in rids}
        self.ran = 0

    def has_work(self):
        return self.ran < len(self.steps)

    def step(self):
        i, self.ran = self.ran, self.ran + 1
        return [
            Event(rid, [100 * i + rid], self.last[rid] == i, "length" if self.last[rid] == i else None, RequestStats())
            for rid in self.steps[i]
        ]

    def cancel(self, rid):
        raise AssertionError("nothing is cancelled here")


class _CountingQueue(queue.SimpleQueue):
    def __init__(self):
        self.handovers = 0

    def put(self, item, *args, **kwargs):
        self.handovers += item is not None and item[0] == "steps"
        super().put(item, *args, **kwargs)


NO_FLAGS = {
    "return_log_probs": False,
    "return_perf_metrics": False,
    "return_num_input_tokens": False,
    "return_num_output_tokens": False,
}


def serve(core, steps, streaming, interval, metrics=None, model=None, name="tensorrt_llm", executor=_ScriptedExecutor):
    """Run both threads over the script; returns (each request's sender, the number of handovers)."""
    model = model or core.TritonPythonModel.__new__(core.TritonPythonModel)
    model.name = name
    model.executor = executor(steps)
    model.lock, model.running, model.outbox = threading.Condition(), True, _CountingQueue()
    senders = {rid: _Sender() for rid in streaming}
    model.jobs = {
        rid: core.RowJob(_Request(), 0, 1, {"left": 1, "sender": senders[rid]}, streaming[rid], True, [1], NO_FLAGS)
        for rid in streaming
    }
    model.stream_interval, model.batcher_metrics, model.spec_metrics = interval, metrics, None
    model.stats_period_s, model.next_handover, model.next_report = 3600.0, 0.0, 0.0
    model.cancel_period_s, model.next_cancel_check = 3600.0, float("inf")
    threads = [
        threading.Thread(target=model.loop, daemon=True),
        threading.Thread(target=model.deliver_loop, daemon=True),
    ]
    for t in threads:
        t.start()
    for sender in senders.values():
        assert sender.done.wait(timeout=30), "a request got no FINAL response"
    with model.lock:
        model.running = False
        model.lock.notify_all()
    threads[0].join(timeout=5)
    model.outbox.put(None)
    threads[1].join(timeout=5)
    return senders, model.outbox.handovers


def due_steps(steps, streaming, interval):
    """The steps that must wake the delivery thread: a finished row or a due streamed response."""
    seen, due = {}, set()
    for i, rids in enumerate(steps):
        for rid in rids:
            seen[rid] = seen.get(rid, 0) + 1
            if i == max(j for j, later in enumerate(steps) if rid in later) or (
                streaming[rid] and streams_now(seen[rid], interval, False)
            ):
                due.add(i)
    return due


STEPS = [[1]] * 3 + [[1, 2]] * 5 + [[2]] * 4  # request 2 joins at step 3; 1 finishes at step 7, 2 at step 11


@pytest.mark.parametrize("interval", [1, 3])
@pytest.mark.parametrize(
    "streaming",
    [{1: False, 2: False}, {1: True, 2: False}, {1: True, 2: True}],
    ids=["not-streamed", "one-streamed", "both-streamed"],
)
def test_every_response_goes_out_and_only_due_steps_wake_the_delivery_thread(core, streaming, interval):
    senders, handovers = serve(core, STEPS, streaming, interval)
    for rid, sender in senders.items():
        tokens = [100 * i + rid for i, rids in enumerate(STEPS) if rid in rids]
        if streaming[rid]:
            due = [n for n in range(1, len(tokens) + 1) if streams_now(n, interval, n == len(tokens))]
            assert [ids for ids, _ in sender.sent] == [tokens[a:b] for a, b in zip([0] + due, due)]
        else:
            assert [ids for ids, _ in sender.sent] == [tokens]
        assert [flags for _, flags in sender.sent] == [0] * (len(sender.sent) - 1) + [FINAL]
    assert handovers == len(due_steps(STEPS, streaming, interval))
    if not any(streaming.values()):
        assert handovers == 2  # the two finishes: no step in between woke the delivery thread


class _Metrics:
    def __init__(self):
        self.steps = 0

    def iteration(self, **counts):
        self.steps += 1


def test_with_metrics_held_steps_go_over_at_the_period_and_each_counts(core):
    metrics = _Metrics()
    senders, handovers = serve(core, [[1]] * 6, {1: False}, 1, metrics)
    assert handovers == 2  # the first step (the period starts there: an hour here), then the finish
    assert metrics.steps == 6  # every step reaches the metrics, held ones included
    assert [ids for ids, _ in senders[1].sent] == [[100 * i + 1 for i in range(6)]]


def test_a_response_that_cannot_be_built_ends_its_request_with_an_error(core):
    model = core.TritonPythonModel.__new__(core.TritonPythonModel)

    def broken(job, tokens, final, log_probs=None):
        raise ValueError("no tensor for you")

    model.response = broken
    senders, _ = serve(core, [[1]] * 3, {1: False}, 1, model=model)
    [(error, flags)] = senders[1].sent
    assert "could not build the response" in error and "no tensor for you" in error and flags == FINAL


class _WhereExecutor(_ScriptedExecutor):
    """Records the CPUs the stepping thread may run on."""

    cpus: list = []

    def step(self):
        _WhereExecutor.cpus.append(os.sched_getaffinity(0))
        return super().step()


@pytest.mark.skipif(
    not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs to keep one"
)
@pytest.mark.parametrize("name, pinned", [("tensorrt_llm", True), ("tensorrt_llm_draft", False)])
def test_the_executor_thread_takes_the_cpus_the_launcher_kept(core, monkeypatch, name, pinned):
    """SPECBUILD_EXECUTOR_CPUS (specbuild/serve/decode_cpus.py): the target core's executor thread runs there;
    a draft core and the other threads (here: this one, which also runs the delivery side) stay where they were."""
    everywhere = os.sched_getaffinity(0)
    kept = max(everywhere)
    monkeypatch.setenv("SPECBUILD_EXECUTOR_CPUS", str(kept))
    _WhereExecutor.cpus = []
    senders, _ = serve(core, [[1]] * 3, {1: True}, 1, name=name, executor=_WhereExecutor)
    assert len(senders[1].sent) == 3
    assert _WhereExecutor.cpus == [{kept} if pinned else everywhere] * 3
    assert os.sched_getaffinity(0) == everywhere


@pytest.mark.skipif(
    not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs to keep one"
)
@pytest.mark.parametrize("name, pinned", [("tensorrt_llm", True), ("tensorrt_llm_draft", False)])
def test_the_llmapi_cores_executor_thread_takes_the_cpus_the_launcher_kept(llmapi_core, monkeypatch, name, pinned):
    """The same for the llm-api flavour's reference core (reference/core_models/llm_api/model.py), whose one worker thread
    steps and sends."""
    everywhere = os.sched_getaffinity(0)
    kept = max(everywhere)
    monkeypatch.setenv("SPECBUILD_EXECUTOR_CPUS", str(kept))
    _WhereExecutor.cpus = []
    model = llmapi_core.TritonPythonModel.__new__(llmapi_core.TritonPythonModel)
    model.name, model.executor, model.jobs = name, _WhereExecutor([[1]] * 3), {}
    model.cond, model.running = threading.Condition(), True
    worker = threading.Thread(target=model.loop, daemon=True)
    worker.start()
    deadline = time.monotonic() + 30
    while model.executor.has_work() and time.monotonic() < deadline:
        time.sleep(0.01)
    with model.cond:
        model.running = False
        model.cond.notify_all()
    worker.join(timeout=5)
    assert not worker.is_alive()
    assert _WhereExecutor.cpus == [{kept} if pinned else everywhere] * 3
    assert os.sched_getaffinity(0) == everywhere
