"""specbuild.serve.server against the real tritonserver (nvidia-pytriton's), with a tiny python-model repo."""

from __future__ import annotations

import base64
import json
import os
import signal
import textwrap
import urllib.error
import urllib.request

import pytest

from serve_helpers import (
    USE_PYTHONPATH,
    alive,
    eventually,
    infer,
    listening,
    marked_processes,
    python_model,
    shm_entries,
)

from specbuild.errors import UserError
from specbuild.serve.binary import find_tritonserver
from specbuild.serve.server import ADMIN_HEADER, TritonServer

pytestmark = pytest.mark.timeout(300)

DOUBLER = (
    USE_PYTHONPATH
    + """
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def initialize(self, args):
        import specbuild
        self.version = specbuild.__version__

    def execute(self, requests):
        out = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "X").as_numpy()
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", (x * 2).astype(np.int32))]))
        return out
"""
)

BROKEN = """
class TritonPythonModel:
    def initialize(self, args):
        raise ValueError("tokenizer_dir /nowhere does not exist")
"""


@pytest.fixture(scope="module")
def binary():
    return find_tritonserver(None)


def test_serves_and_stops_by_pid(tmp_path, binary):
    repo = tmp_path / "repo"
    python_model(repo, "doubler", DOUBLER)
    python_model(repo, "tripler", DOUBLER)
    server = TritonServer(repo, binary=binary, log_path=tmp_path / "server.log")
    with server:
        pid = server.pid
        assert alive(pid)
        assert server.model_ready("doubler") and server.model_ready("tripler")
        assert infer(server, "doubler", [1, 2, 3]) == [2, 4, 6]
        assert server.grpc_url == f"127.0.0.1:{server.grpc_port}"
        with urllib.request.urlopen(server.metrics_url, timeout=10) as r:
            assert b"nv_inference_count" in r.read()
        # a fixed port that is taken is refused (tritonserver would silently share it: SO_REUSEPORT)
        with pytest.raises(UserError, match=f"--http-port {server.http_port}: the port is already in use"):
            TritonServer(repo, binary=binary, http_port=server.http_port).start(30)
    assert server.pid is None
    assert not alive(pid)


def test_load_errors_in_plain_words(tmp_path, binary):
    repo = tmp_path / "repo"
    python_model(repo, "doubler", DOUBLER)
    python_model(repo, "broken", BROKEN)
    server = TritonServer(repo, binary=binary, log_path=tmp_path / "server.log")
    with pytest.raises(UserError) as err:
        server.start(60)
    message = str(err.value)
    assert "model broken: Internal: ValueError: tokenizer_dir /nowhere does not exist" in message
    assert "model doubler" not in message
    assert str(tmp_path / "server.log") in message
    assert server.pid is None


def test_explicit_model_control_loads_only_what_is_asked(tmp_path, binary):
    repo = tmp_path / "repo"
    python_model(repo, "doubler", DOUBLER)
    python_model(repo, "broken", BROKEN)
    with TritonServer(repo, binary=binary, model_control="explicit", load_models=["doubler"]) as server:
        assert server.model_ready("doubler")
        assert not server.model_ready("broken")
        assert infer(server, "doubler", [5]) == [10]
        names = {e["name"]: e.get("state") for e in server.repository_index()}
        assert names["doubler"] == "READY" and names.get("broken") is None


def test_serves_through_a_repository_launch_script(tmp_path, binary):
    """GPU repositories start through their launch_triton.sh (ports from HTTP_PORT/GRPC_PORT/METRICS_PORT, our
    other arguments passed to rank 0). A stand-in script with the same interface runs the CPU server here; like
    the scripts specbuild writes, it names no backend folder: the server's own (nvidia-pytriton's cached copy)
    comes among our arguments."""
    repo = tmp_path / "repo"
    python_model(repo, "doubler", DOUBLER)
    script = repo / "launch_triton.sh"
    script.write_text(
        textwrap.dedent("""\
        #!/usr/bin/env bash
        set -euo pipefail
        REPO="$(cd "$(dirname "$0")" && pwd)"
        echo "launch script: ports $HTTP_PORT $GRPC_PORT $METRICS_PORT"
        exec "$TRITONSERVER" --model-repository="$REPO" \\
            --http-port="$HTTP_PORT" --grpc-port="$GRPC_PORT" --metrics-port="$METRICS_PORT" "$@"
    """)
    )
    server = TritonServer(repo, binary=binary, launcher=script, log_path=tmp_path / "server.log")
    assert server.argv()[:2] == ["bash", str(script)]
    argv = server.argv()
    if binary.backend_dir is not None:
        assert argv[argv.index("--backend-directory") + 1] == str(binary.backend_dir)
    with server:
        assert infer(server, "doubler", [4]) == [8]
        log = server.read_log()
        assert f"launch script: ports {server.http_port} {server.grpc_port} {server.metrics_port}" in log
    assert server.pid is None


def _post(server: TritonServer, path: str, body: dict, headers: dict | None = None) -> tuple[int, str]:
    req = urllib.request.Request(
        server.http_url + path,
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json", **(headers or {})},
    )
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def _upload(source: str) -> dict:
    """A load request that carries a model's files: the way a client would run its own code on the server."""
    config = {
        "name": "uploaded",
        "backend": "python",
        "max_batch_size": 0,
        "input": [{"name": "X", "data_type": "TYPE_INT32", "dims": [-1]}],
        "output": [{"name": "Y", "data_type": "TYPE_INT32", "dims": [-1]}],
    }
    return {"parameters": {"config": json.dumps(config), "file:1/model.py": base64.b64encode(source.encode()).decode()}}


def test_explicit_model_control_opens_the_repository_api_only_with_the_key(tmp_path, binary):
    repo = tmp_path / "repo"
    python_model(repo, "doubler", DOUBLER)
    python_model(repo, "tripler", DOUBLER)
    marker = tmp_path / "client-code-ran"
    evil = DOUBLER.replace(
        "self.version = specbuild.__version__",
        f"self.version = specbuild.__version__; open({str(marker)!r}, 'w').write('ran')",
    )
    with TritonServer(repo, binary=binary, model_control="explicit", load_models=["doubler"]) as server:
        assert server.admin_key and server.admin_headers == {ADMIN_HEADER: server.admin_key}
        # without the key: no load (with or without uploaded files), no unload, no index
        code, text = _post(server, "/v2/repository/models/uploaded/load", _upload(evil))
        assert code == 403 and "restricted" in text
        assert _post(server, "/v2/repository/models/tripler/load", {})[0] == 403
        assert _post(server, "/v2/repository/models/doubler/unload", {})[0] == 403
        assert _post(server, "/v2/repository/index", {})[0] == 403
        assert _post(server, "/v2/repository/models/tripler/load", {}, {ADMIN_HEADER: "wrong"})[0] == 403
        assert not marker.exists() and not server.model_ready("uploaded") and not server.model_ready("tripler")
        assert server.model_ready("doubler") and infer(server, "doubler", [3]) == [6]  # inference stays open
        # with the key, over HTTP and gRPC
        assert _post(server, "/v2/repository/models/tripler/load", {}, server.admin_headers)[0] == 200
        assert server.model_ready("tripler") and infer(server, "tripler", [2]) == [4]
        # the refused request was a real attack: with the key, the uploaded code loads and runs
        assert _post(server, "/v2/repository/models/uploaded/load", _upload(evil), server.admin_headers)[0] == 200
        assert marker.read_text() == "ran" and infer(server, "uploaded", [1]) == [2]
        import tritonclient.grpc as grpcclient
        from tritonclient.utils import InferenceServerException

        client = grpcclient.InferenceServerClient(server.grpc_url)
        with pytest.raises(InferenceServerException, match="restricted"):
            client.unload_model("tripler")
        client.unload_model("tripler", headers=server.admin_grpc_headers)
        assert eventually(lambda: not server.model_ready("tripler"), 30)


def test_default_model_control_has_no_key_and_refuses_loads(tmp_path, binary):
    repo = tmp_path / "repo"
    python_model(repo, "doubler", DOUBLER)
    with TritonServer(repo, binary=binary) as server:
        assert server.admin_key is None and server.admin_headers == {}
        code, text = _post(server, "/v2/repository/models/uploaded/load", _upload(DOUBLER))
        assert code >= 400 and not server.model_ready("uploaded")


def test_a_killed_server_leaves_nothing_once_stopped(tmp_path, binary):
    """SIGKILL the server itself: its python stub and its /dev/shm regions stay behind; stop() removes them."""
    repo = tmp_path / "repo"
    python_model(repo, "doubler", DOUBLER)
    server = TritonServer(repo, binary=binary, log_path=tmp_path / "server.log").start(120)
    me, tag, port, pid = os.getpid(), server.tag, server.http_port, server.pid
    try:
        assert pid in marked_processes(me, tag) and len(marked_processes(me, tag)) >= 2  # the server and a stub
        assert shm_entries(me, tag) and all(
            os.path.basename(e).startswith(server.shm_prefix) for e in shm_entries(me, tag)
        )
        os.kill(pid, signal.SIGKILL)
        assert eventually(lambda: not alive(pid), 10)
        assert shm_entries(me, tag), "a SIGKILLed server cannot remove its regions: this test would prove nothing"
    finally:
        server.stop()
    assert marked_processes(me, tag) == [] and shm_entries(me, tag) == [] and not listening(port)


def test_a_port_taken_while_the_server_loads_is_chosen_again(tmp_path, binary, monkeypatch):
    """Ports are chosen free, but tritonserver binds them only once its models loaded: another server can take
    one in between (CI runs servers side by side). The server that finds another answering chooses again."""
    import specbuild.serve.server as server_module

    python_model(tmp_path / "first", "doubler", DOUBLER)
    python_model(tmp_path / "second", "doubler", DOUBLER)
    with TritonServer(tmp_path / "first", binary=binary) as first:
        taken = [first.http_port, first.grpc_port, first.metrics_port]
        real_free, real_in_use = server_module.free_ports, server_module.port_in_use
        calls = []

        def free_then_taken(host, count):  # the first choice: the ports `first` took since
            calls.append(count)
            return taken if len(calls) == 1 else real_free(host, count)

        monkeypatch.setattr(server_module, "free_ports", free_then_taken)
        monkeypatch.setattr(server_module, "port_in_use", lambda host, port: len(calls) > 1 and real_in_use(host, port))
        with TritonServer(tmp_path / "second", binary=binary) as second:
            assert len(calls) == 2 and second.http_port not in taken
            assert second.server_metadata()["name"] == second.server_id != first.server_id
            assert infer(second, "doubler", [1, 2]) == [2, 4]
