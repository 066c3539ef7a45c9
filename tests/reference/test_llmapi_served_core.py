"""The served llm-api reference core (reference/core_models/llm_api/model.py) frees what a request used when the request ends, by
reference counting alone, and never has two threads inside triton_python_backend_utils at once.

Its growth under a soak (bench/soak_llmapi.py; bench/README 'Soak of the llm-api core') came from reference cycles:
every KV cache referred to itself through its transformers view, and each greedy verification left a recursive
closure behind. Cyclic garbage waits for Python's full collections, which a server holding some 370,000 long-lived
objects (torch, transformers) runs rarely, so each cycle kept its cache's buffers — megabytes per request — alive
long after the request ended, and the allocator kept the pages. These tests bound the work, not the time: they
count the objects the cyclic collector would have to free after a fixed set of requests (zero), through the whole
served core (reference/core_models/llm_api/model.py under a stand-in for triton_python_backend_utils: good requests streamed and
not, requests that join a running batch, client cancellations, stop requests, refused requests) and through the
executor of every reference method.

The python backend stub corrupted its Python heap when the core's threads called into it side by side (a
segmentation fault in _PyObject_Malloc within minutes of the soak: ResponseSender.send and is_cancelled() release
the GIL and work in the stub's shared structures while another thread reads a request's inputs). The stand-in
below counts the threads inside it, holding each call open a moment so that overlaps happen if they can.
"""

from __future__ import annotations

import collections
import gc
import importlib.util
import sys
import threading
import time
import types
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "checkpoints" / "tiny"
FINAL = 1

pytestmark = pytest.mark.skipif(not (TINY / "draft" / "config.json").is_file(), reason="checkpoints/tiny not built")


@contextmanager
def cyclic_garbage():
    """Yields a list that holds, afterwards, the objects only the cyclic collector could free (by type name)."""
    found: list[str] = []
    gc.collect()
    gc.disable()
    try:
        gc.set_debug(gc.DEBUG_SAVEALL)
        yield found
        gc.collect()
    finally:
        gc.set_debug(0)
        found += [type(o).__qualname__ for o in gc.garbage]
        gc.garbage.clear()
        gc.enable()


def describe(found: list[str]) -> str:
    return ", ".join(f"{n} {name}" for name, n in collections.Counter(found).most_common(8))


# --- the served core ---------------------------------------------------------------------------------------------


class _Inside:
    """The threads inside the stand-in's calls now (a call may make another: pb_utils objects), and the most there
    ever were at once."""

    lock = threading.Lock()
    depth: dict[int, int] = {}
    most = 0
    calls = 0

    @classmethod
    @contextmanager
    def call(cls, hold_s: float = 0.0):
        me = threading.get_ident()
        with cls.lock:
            cls.depth[me] = cls.depth.get(me, 0) + 1
            cls.calls += 1
            cls.most = max(cls.most, len(cls.depth))
        try:
            if hold_s:
                time.sleep(hold_s)
            yield
        finally:
            with cls.lock:
                cls.depth[me] -= 1
                if not cls.depth[me]:
                    del cls.depth[me]


class _Tensor:
    def __init__(self, name, array):
        with _Inside.call():
            self._name, self.array = name, array

    def name(self):
        return self._name

    def as_numpy(self):
        return self.array


class _Response:
    def __init__(self, output_tensors=(), error=None):
        with _Inside.call():
            self.tensors = {t.name(): t.array for t in output_tensors}
            self.error = error


class _Sender:
    def __init__(self):
        self.final = threading.Event()
        self.error = None

    def send(self, response=None, flags=0):
        with _Inside.call(hold_s=0.002):  # the stub's send waits for the server: the widest window
            if response is not None and response.error is not None:
                self.error = response.error
            if flags & FINAL:
                self.final.set()


class _Request:
    def __init__(self, inputs: dict, request_id: str = ""):
        self.inputs_ = {
            k: np.asarray(v, dtype=np.object_ if isinstance(v[0], bytes) else None) for k, v in inputs.items()
        }
        self.id = request_id
        self.sender = _Sender()
        self.cancel = False

    def request_id(self):
        with _Inside.call():
            return self.id

    def inputs(self):
        with _Inside.call(hold_s=0.001):
            return [_Tensor(name, array) for name, array in self.inputs_.items()]

    def parameters(self):  # pb_utils.InferenceRequest.parameters(): the request's parameters as JSON
        with _Inside.call():
            return "{}"

    def get_response_sender(self):
        with _Inside.call():
            return self.sender

    def is_cancelled(self):
        with _Inside.call(hold_s=0.001):
            return self.cancel


def _stand_in_pb_utils() -> types.ModuleType:
    pb = types.ModuleType("triton_python_backend_utils")
    pb.Tensor = _Tensor
    pb.InferenceResponse = _Response
    pb.TritonError = lambda message, code=None: message
    pb.TritonError.CANCELLED = 1
    pb.TritonModelException = RuntimeError
    pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL = FINAL
    return pb


@pytest.fixture(scope="module")
def served_core(tmp_path_factory):
    """The llm-api core of the soak's deployment (recipes/reference/llmapi_draft_target.yaml), loaded in process."""
    from specbuild.plan import Layout
    from specbuild.recipe.loader import load_recipe
    from specbuild.runtimes.build import resolve_build

    build = resolve_build(load_recipe(ROOT / "recipes" / "reference" / "llmapi_draft_target.yaml"))
    recipe = build.recipe
    root = tmp_path_factory.mktemp("llmapi")
    repo = build.runtime.write_repository(
        recipe, build.spec, Layout(root / "e", root / "r", root / "p", recipe.name), "target"
    )
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(sys.modules, "triton_python_backend_utils", _stand_in_pb_utils())
        mp.setenv("SPECBUILD_TORCH_THREADS", "1")
        spec = importlib.util.spec_from_file_location("llmapi_core_memory", repo / "tensorrt_llm" / "1" / "model.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        model = module.TritonPythonModel()
        model.initialize({"model_name": "tensorrt_llm"})
        try:
            yield model
        finally:
            model.finalize()


PROMPTS = [b"def add(a, b):", b"class Stack:\n    def push(self, item):", b"import os\nfor name in os.listdir('.'):"]


def _good(i: int) -> dict:
    return {"text_input": [PROMPTS[i % 3]], "sampling_param_max_tokens": [4 + 6 * (i % 3)], "streaming": [i % 2 == 1]}


def _requests(n: int) -> list[tuple[_Request, str]]:
    """n good requests (streamed and not, sampled and greedy) with, spread among them, the other kinds."""
    out = []
    for i in range(n):
        out.append((_Request(_good(i)), "good"))
        if i % 4 == 1:
            sampled = {
                **_good(i),
                "sampling_param_temperature": [0.8],
                "sampling_param_top_k": [20],
                "sampling_param_seed": [i],
            }
            out.append((_Request(sampled), "good"))
        if i % 4 == 2:  # a long stream the client cancels after it started
            out.append((_Request({**_good(i), "sampling_param_max_tokens": [200], "streaming": [True]}), "cancel"))
        if i % 4 == 3:
            out.append((_Request({"text_input": [PROMPTS[0]], "sampling_param_max_tokens": [0]}), "refused"))
            long = _Request({**_good(i), "sampling_param_max_tokens": [200], "streaming": [True]}, f"stop-{i}")
            out += [(long, "stopped"), (_Request({"text_input": [b""], "stop": [True]}, f"stop-{i}"), "stop")]
    return out


def _serve(model, requests: list[tuple[_Request, str]]) -> None:
    """Send the requests a few at a time (later ones join a running batch) and wait for every FINAL response."""
    for start in range(0, len(requests), 3):
        wave = requests[start : start + 3]
        for request, kind in wave:
            model.execute([request])
        for request, kind in wave:
            if kind == "cancel":
                request.cancel = True
    for request, kind in requests:
        assert request.sender.final.wait(timeout=120), f"a {kind} request got no FINAL response"
    with model.cond:
        assert not model.jobs, "finished requests are still held by the core"


def test_requests_leave_no_reference_cycles_in_the_served_core(served_core):
    _serve(served_core, _requests(8))  # warm up: first-call caches, the prefix store's first entries
    requests = _requests(16)
    with cyclic_garbage() as found:
        _serve(served_core, requests)
    assert sum(kind == "good" for _, kind in requests) == 20
    refused = [r.sender.error for r, kind in requests if kind == "refused"]
    assert refused and all("max_tokens" in e for e in refused)
    assert all(r.sender.error and "cancel" in r.sender.error.lower() for r, kind in requests if kind == "stop")
    assert not found, f"{len(found)} objects left for the cyclic collector: {describe(found)}"


def test_one_thread_at_a_time_calls_into_the_python_backend(served_core):
    """Requests arrive (execute, Triton's thread) while others decode, stream and finish (the executor thread) and
    get cancelled (the cancellation thread): the stand-in for triton_python_backend_utils never has two of these
    threads inside at once."""
    _Inside.most = 0
    calls = _Inside.calls
    requests = _requests(12)
    _serve(served_core, requests)
    assert _Inside.calls - calls > 3 * len(requests)  # the stand-in saw the traffic
    assert _Inside.most == 1, f"{_Inside.most} threads were inside triton_python_backend_utils at once"


def test_the_heap_is_trimmed_once_the_executor_goes_idle(served_core, monkeypatch):
    """After work, and IDLE_TRIM_S of idleness, the core gives the heap's free pages back (once per idle spell)."""
    from specbuild.reference.decoder import heap

    trims = []
    monkeypatch.setattr(heap, "trim_heap", lambda: trims.append(served_core.executor.has_work()) or True)
    _serve(served_core, _requests(2))
    deadline = time.monotonic() + 60
    while not trims and time.monotonic() < deadline:
        time.sleep(0.1)
    assert trims == [False], "no trim once the executor went idle"
    time.sleep(3 * type(served_core).loop.__globals__["IDLE_TRIM_S"])
    assert trims == [False], "trimmed again without work in between"
    assert heap._malloc_trim() is not None or not sys.platform.startswith("linux")


def test_a_kv_cache_is_freed_by_reference_counting():
    import weakref

    import torch

    from specbuild.reference.decoder.kv_cache import KVCache

    config = types.SimpleNamespace(num_hidden_layers=2)
    with cyclic_garbage() as found:
        cache = KVCache(config, 2)
        cache._allocate(torch.zeros(1, 2, 4, 8), 16)
        assert cache.store.get_seq_length() == 0  # the transformers view works without being kept
        gone = weakref.ref(cache)
        del cache
        assert gone() is None
    assert not found, describe(found)


# --- every reference method ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("label", ["prompt_lookup", "draft_target", "medusa", "eagle2", "lookahead"])
def test_every_method_leaves_no_reference_cycles(label, tmp_path):
    """Requests that join a running batch, reuse a kept prefix, sample, and one cancelled mid-decode."""
    sys.path.insert(0, str(Path(__file__).parent))
    from zoo_engines import METHODS, build_draft, build_target, has_extras

    from specbuild.reference.engine_folder import load_engine
    from specbuild.reference.decoder.executor import Executor, Request, SamplingConfig

    method, decoding, k, extra, pretrained = METHODS[label]
    if not has_extras(TINY, extra):
        pytest.skip(f"checkpoints/tiny has no {extra}")
    limits = dict(max_batch_size=4, max_input_len=32, max_seq_len=96, max_num_tokens=256)
    target = build_target(
        TINY,
        tmp_path / "target",
        method=method,
        decoding=decoding,
        max_draft_len=k,
        extra=extra,
        pretrained=pretrained,
        limits=limits,
    )
    draft = load_engine(build_draft(TINY, tmp_path / "draft", limits)) if method == "draft_target" else None
    executor = Executor(load_engine(target), draft, enable_kv_cache_reuse=True)

    def run():
        ids = []
        for i in range(6):
            sampling = SamplingConfig(temperature=0.8, top_k=20, seed=i) if i % 2 else SamplingConfig()
            prompt = [1, 100, 200, 300, 400] if i % 3 == 0 else [1, 7 + i, 50, 60 + i]
            ids.append(executor.enqueue(Request(input_ids=prompt, max_new_tokens=12, sampling=sampling, end_id=2)))
            executor.step()
        executor.cancel(ids[-1])
        while executor.has_work():
            executor.step()

    run()
    with cyclic_garbage() as found:
        run()
    assert executor.prefix_store is not None and executor.prefix_store.hits > 0
    assert not found, f"{len(found)} objects left for the cyclic collector: {describe(found)}"
