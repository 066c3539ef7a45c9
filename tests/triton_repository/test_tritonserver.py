"""specbuild.serve.tritonserver against the real tritonserver (nvidia-pytriton's), with a tiny python-model repo."""

from __future__ import annotations

import json
import os
import socket
import textwrap
import urllib.request
from pathlib import Path

import pytest

from specbuild.errors import UserError
from specbuild.serve import tritonserver as ts

pytestmark = pytest.mark.timeout(300)

DOUBLER = '''
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def initialize(self, args):
        # The stub's embedded Python ignores PYTHONPATH; models that need specbuild add its entries themselves
        # (the launcher puts the folder holding the specbuild package there).
        import os, sys
        for entry in reversed(os.environ.get("PYTHONPATH", "").split(os.pathsep)):
            if entry and entry not in sys.path:
                sys.path.insert(0, entry)
        import specbuild
        self.version = specbuild.__version__

    def execute(self, requests):
        out = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "X").as_numpy()
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", (x * 2).astype(np.int32))]))
        return out
'''

BROKEN = '''
class TritonPythonModel:
    def initialize(self, args):
        raise ValueError("tokenizer_dir /nowhere does not exist")
'''


def _model(repo: Path, name: str, source: str) -> None:
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(textwrap.dedent(f'''
        name: "{name}"
        backend: "python"
        max_batch_size: 0
        input [ {{ name: "X" data_type: TYPE_INT32 dims: [ -1 ] }} ]
        output [ {{ name: "Y" data_type: TYPE_INT32 dims: [ -1 ] }} ]
        instance_group [ {{ count: 1 kind: KIND_CPU }} ]
    '''))
    (repo / name / "1" / "model.py").write_text(source)


def _infer(server: ts.TritonServer, model: str, values: list[int]) -> list[int]:
    body = json.dumps({"inputs": [{"name": "X", "shape": [len(values)], "datatype": "INT32", "data": values}]})
    req = urllib.request.Request(f"{server.http_url}/v2/models/{model}/infer", data=body.encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())["outputs"][0]["data"]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is not alive
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


@pytest.fixture(scope="module")
def binary():
    return ts.find_tritonserver(None)


def test_explicit_binary_must_exist(tmp_path):
    with pytest.raises(UserError, match="--tritonserver"):
        ts.find_tritonserver(tmp_path / "no-such-tritonserver")


def test_bundled_binary_setup(binary):
    if binary.source != "nvidia-pytriton":
        pytest.skip("a system tritonserver is used here")
    stub = binary.backend_dir / "python" / "triton_python_backend_stub"
    assert stub.is_file() and os.access(stub, os.X_OK)
    assert "nvidia_pytriton.libs" in binary.env["LD_LIBRARY_PATH"]
    assert binary.env["PATH"].split(os.pathsep)[0] == str(Path(os.sys.prefix) / "bin")
    assert str(ts.specbuild_source_root()) in binary.env["PYTHONPATH"].split(os.pathsep)


def test_free_port_is_bindable():
    port = ts.free_port()
    assert not ts.port_in_use("127.0.0.1", port)


def test_serves_and_stops_by_pid(tmp_path, binary):
    repo = tmp_path / "repo"
    _model(repo, "doubler", DOUBLER)
    _model(repo, "tripler", DOUBLER)
    server = ts.TritonServer(repo, binary=binary, log_path=tmp_path / "server.log")
    with server:
        pid = server.pid
        assert _alive(pid)
        assert server.model_ready("doubler") and server.model_ready("tripler")
        assert _infer(server, "doubler", [1, 2, 3]) == [2, 4, 6]
        assert server.grpc_url == f"127.0.0.1:{server.grpc_port}"
        with urllib.request.urlopen(server.metrics_url, timeout=10) as r:
            assert b"nv_inference_count" in r.read()
        # a fixed port that is taken is refused (tritonserver would silently share it: SO_REUSEPORT)
        with pytest.raises(UserError, match=f"--http-port {server.http_port}: the port is already in use"):
            ts.TritonServer(repo, binary=binary, http_port=server.http_port).start(30)
    assert server.pid is None
    assert not _alive(pid)


def test_load_errors_in_plain_words(tmp_path, binary):
    repo = tmp_path / "repo"
    _model(repo, "doubler", DOUBLER)
    _model(repo, "broken", BROKEN)
    server = ts.TritonServer(repo, binary=binary, log_path=tmp_path / "server.log")
    with pytest.raises(UserError) as err:
        server.start(60)
    message = str(err.value)
    assert "model broken: Internal: ValueError: tokenizer_dir /nowhere does not exist" in message
    assert "model doubler" not in message
    assert str(tmp_path / "server.log") in message
    assert server.pid is None


def test_explicit_model_control_loads_only_what_is_asked(tmp_path, binary):
    repo = tmp_path / "repo"
    _model(repo, "doubler", DOUBLER)
    _model(repo, "broken", BROKEN)
    with ts.TritonServer(repo, binary=binary, model_control="explicit", load_models=["doubler"]) as server:
        assert server.model_ready("doubler")
        assert not server.model_ready("broken")
        assert _infer(server, "doubler", [5]) == [10]
        names = {e["name"]: e.get("state") for e in server.repository_index()}
        assert names["doubler"] == "READY" and names.get("broken") is None


def test_log_parser_on_a_real_log_excerpt():
    # lines as tritonserver 2.51 writes them (escaped newlines inside the quoted message)
    log = textwrap.dedent('''\
        I1129 16:03:44.864016 9439 model_lifecycle.cc:472] "loading: core:1"
        E1129 16:03:44.864000 9439 model_lifecycle.cc:642] "failed to load 'core' version 1: Internal: ModuleNotFoundError: No module named 'specbuild'\\n\\nAt:\\n  /r/core/1/model.py(6): initialize\\n"
        I1129 16:03:44.942813 9439 server.cc:674]
        +-------+---------+-------------------------------------------------------------+
        | Model | Version | Status                                                      |
        +-------+---------+-------------------------------------------------------------+
        | core  | 1       | UNAVAILABLE: Internal: ModuleNotFoundError: No module named |
        | trt   | 1       | UNAVAILABLE: Invalid argument: unable to find backend library for backend 'tensorrtllm' |
        | pre   | 1       | READY                                                       |
        +-------+---------+-------------------------------------------------------------+
    ''')
    errors = ts.load_errors_from_log(log)
    assert set(errors) == {"core", "trt"}
    assert ts.plain_reason(errors["core"]) == "Internal: ModuleNotFoundError: No module named 'specbuild'"
    assert "tensorrtllm" in errors["trt"]


def test_port_in_use_detects_a_listener():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        assert ts.port_in_use("127.0.0.1", s.getsockname()[1])


def test_serves_through_a_repository_launch_script(tmp_path, binary, monkeypatch):
    """GPU repositories start through their launch_triton.sh (ports from HTTP_PORT/GRPC_PORT/METRICS_PORT, our
    other arguments passed to rank 0). A stand-in script with the same interface runs the CPU server here."""
    repo = tmp_path / "repo"
    _model(repo, "doubler", DOUBLER)
    script = repo / "launch_triton.sh"
    script.write_text(textwrap.dedent('''\
        #!/usr/bin/env bash
        set -euo pipefail
        REPO="$(cd "$(dirname "$0")" && pwd)"
        echo "launch script: ports $HTTP_PORT $GRPC_PORT $METRICS_PORT"
        exec "$TRITONSERVER" --model-repository="$REPO" --backend-directory="$TEST_BACKEND_DIR" \\
            --http-port="$HTTP_PORT" --grpc-port="$GRPC_PORT" --metrics-port="$METRICS_PORT" "$@"
    '''))
    monkeypatch.setenv("TEST_BACKEND_DIR", str(binary.backend_dir))
    server = ts.TritonServer(repo, binary=binary, launcher=script, log_path=tmp_path / "server.log")
    assert server.argv()[:2] == ["bash", str(script)]
    with server:
        assert _infer(server, "doubler", [4]) == [8]
        log = server.read_log()
        assert f"launch script: ports {server.http_port} {server.grpc_port} {server.metrics_port}" in log
    assert server.pid is None
