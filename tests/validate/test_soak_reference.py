"""A bounded soak of served reference repositories (issue #16): the demo's EAGLE deployment (its ensemble and
BLS) and the draft-target deployment (its BLS and ensemble), each built from its shipped recipe and served by the
real tritonserver, hit by 32 clients with the request mix of specbuild.validate.mix: a fixed number of greedy
requests (HTTP generate, HTTP generate_stream, the gRPC stream with every output and with text_output only; two
lengths; three prompts) amid every bad-input class (values, types, shapes, data types, batch > max_batch_size,
out-of-vocabulary ids, NaN/negative/infinite temperature, top_p > 1, huge top_k, cancellation and disconnects).

Every good answer must equal the same request's answer when sent alone; no request may be lost or left
unanswered; every request that must be refused is refused; afterwards the server is live, every model ready, a
normal request to each model succeeds, no python backend stub died, and the server's RSS growth is reported.
bench/soak.py repeats longer soaks."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from specbuild.methods import describe
from specbuild.runtimes import runtime_for
from specbuild.runtimes.build import resolve_build

pytestmark = pytest.mark.timeout(900)

ROOT = Path(__file__).resolve().parents[2]
RECIPES = {
    "eagle": ROOT / "tests" / "recipes" / "demo_tiny.yaml",
    "draft_target": ROOT / "recipes" / "reference" / "draft_target.yaml",
}
CONCURRENCY = 32
GOOD_REQUESTS = {"eagle": 96, "draft_target": 48}  # the draft-target BLS answers a batch at a time: fewer
MAX_TOKENS = (4, 8)


def soak_recipe(path: Path):
    from specbuild.recipe.loader import load_recipe

    recipe = load_recipe(path)
    validation = recipe.validation.model_copy(update={"max_tokens": max(MAX_TOKENS), "request_timeout_s": 120.0})
    return recipe.model_copy(update={"validation": validation})


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """{name: (recipe, TritonServer)}, both servers started side by side."""
    from contextlib import ExitStack

    from specbuild.compile import build_engines
    from specbuild.plan import Layout
    from specbuild.serve import TritonServer
    from specbuild.repository.engine.writer import write_repository

    root = tmp_path_factory.mktemp("soak")
    servers, recipes = {}, {}
    for name, path in RECIPES.items():
        recipe = soak_recipe(path)
        layout = Layout(root / name / "engines", root / name / "triton_repo", root / name / "reports", recipe.name)
        build_engines(resolve_build(recipe), layout)
        repo = write_repository(recipe, describe(recipe), layout, flavour=runtime_for(recipe))
        servers[name] = TritonServer(repo, log_path=root / f"{name}.log", exit_timeout_s=1)
        recipes[name] = recipe
    with ExitStack() as stack:
        errors: list[BaseException] = []

        def start(server):
            try:
                server.start()
            except BaseException as e:  # noqa: BLE001 - raised below, in the test's thread
                errors.append(e)

        stack.callback(_in_parallel, lambda s: s.stop(), servers.values())
        _in_parallel(start, servers.values())
        if errors:
            raise errors[0]
        yield {name: (recipes[name], servers[name]) for name in servers}


def _in_parallel(fn, items) -> None:
    threads = [threading.Thread(target=fn, args=(item,)) for item in items]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


@pytest.mark.parametrize("name", list(RECIPES))
def test_soak(served, name, record_property):
    from specbuild.validate.local_server import LocalServer
    from specbuild.validate.soak import soak

    recipe, server = served[name]
    result = soak(
        resolve_build(recipe),
        server.http_address,
        server.grpc_url,
        concurrency=CONCURRENCY,
        requests=GOOD_REQUESTS[name],
        server=LocalServer(server.pid),
        max_tokens=MAX_TOKENS,
    )
    d = result.to_dict()
    srv = d["server"]
    record_property("rss_growth", srv["rss_growth"])
    print(
        f"\nsoak {name}: {d['sent']} requests in {d['wall_s']:.1f} s, RSS {srv['rss_before_bytes'] >> 20} -> "
        f"{srv['rss_after_bytes'] >> 20} MiB ({srv['rss_growth']:+.1%})"
    )

    assert d["lost"] == 0, d["examples"].get("lost")
    good, bad = d["good"], d["bad"]
    assert good["sent"] == GOOD_REQUESTS[name]
    assert good["equal"] == good["sent"], (good, d["examples"])  # nothing mixed, diverged, refused, unanswered
    assert set(d["by_model"]) == {"ensemble", "tensorrt_llm_bls"}
    # every bad-input class went to both models, and each got a clean answer; those that must be refused were
    classes = _case_names(recipe, server)
    assert set(d["by_case"]) == classes and bad["sent"] == 2 * len(classes)
    assert bad["no answer"] == 0, d["examples"].get("bad: no answer")
    assert bad["accepted"] == 0, d["examples"].get("bad: accepted")
    # healthy afterwards: live, every model ready, a normal request to each model answered, no stub died
    assert d["health"] == {"live": True, "not_ready": [], "follow_up_failed": {}}
    assert srv["alive"] and srv["stubs_died"] == []
    assert {"tensorrt_llm_0_0", "tensorrt_llm_bls_0_0", "preprocessing_0_0", "postprocessing_0_0"} <= set(srv["stubs"])
    assert srv["rss_growth"] is not None
    assert d["problems"] == []


def _case_names(recipe, server) -> set[str]:
    from specbuild.validate.checks.bad_input import cases
    from specbuild.validate.endpoints import Endpoints
    from specbuild.validate.context import close_context, make_context

    ctx = make_context(resolve_build(recipe), Endpoints.of(server))
    try:
        return {c.name for c in cases(ctx)}
    finally:
        close_context(ctx)


def test_a_batch_with_one_refused_row_gets_one_error_and_nothing_after(served):
    """The reference core queues a request's rows one by one; when a later row is refused, the earlier rows are
    withdrawn, so nothing is sent on (or asked of) the response sender after its final error response."""
    import queue
    import time

    import numpy as np
    import tritonclient.grpc as grpcclient

    _, server = served["eagle"]

    def tensor(name, array, dtype):
        t = grpcclient.InferInput(name, list(array.shape), dtype)
        t.set_data_from_numpy(array)
        return t

    results: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(server.grpc_url)
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    try:
        inputs = [
            tensor("input_ids", np.array([[5, 6, 7], [5, 6, 7]], dtype=np.int32), "INT32"),
            tensor("input_lengths", np.array([[3], [3]], dtype=np.int32), "INT32"),
            tensor("request_output_len", np.array([[8], [8]], dtype=np.int32), "INT32"),
            tensor("end_id", np.array([[1], [2**31 - 1]], dtype=np.int32), "INT32"),
            tensor("streaming", np.array([[True], [True]]), "BOOL"),
        ]
        client.async_stream_infer("tensorrt_llm", inputs, request_id="two-rows", enable_empty_final_response=True)
        _, error = results.get(timeout=120)
        assert error is not None and "end_id" in str(error)
        time.sleep(2.0)  # row 0 would have decoded its 8 tokens by now
        assert results.empty(), results.get()
    finally:
        client.stop_stream()
        client.close()
    assert "has been closed" not in server.read_log()
    assert server.model_ready("tensorrt_llm")
