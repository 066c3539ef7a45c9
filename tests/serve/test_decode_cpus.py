"""CPUs kept for the reference core's decoding thread (specbuild/serve/decode_cpus.py): the plan, the launcher
against the real tritonserver (the server and its stubs run on the rest, the core's thread on the kept CPU), and the
command line's check of --decode-cpus."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner
from serve_helpers import USE_PYTHONPATH, infer, python_model

from specbuild.cli import cli
from specbuild.errors import UserError
from specbuild.serve import decode_cpus
from specbuild.serve.binary import find_tritonserver
from specbuild.serve.server import TritonServer

pytestmark = pytest.mark.timeout(300)
TWO_CPUS = pytest.mark.skipif(
    not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs to keep one"
)


def test_auto_keeps_the_last_cpus_when_some_are_left():
    assert decode_cpus.plan("auto", {0, 1, 2, 3}, 1) == decode_cpus.CpuSplit(frozenset({3}), frozenset({0, 1, 2}))
    assert decode_cpus.plan("auto", {0, 1, 2, 3}, 2) == decode_cpus.CpuSplit(frozenset({2, 3}), frozenset({0, 1}))
    assert decode_cpus.plan("auto", {0, 1}, 2) is None  # nothing would be left for tritonserver
    assert decode_cpus.plan("auto", {5}, 1) is None
    assert decode_cpus.plan("off", {0, 1, 2, 3}, 1) is None


def test_a_list_keeps_those_cpus_and_bad_lists_say_what_to_do():
    assert decode_cpus.plan("0, 2", {0, 1, 2, 3}, 1) == decode_cpus.CpuSplit(frozenset({0, 2}), frozenset({1, 3}))
    with pytest.raises(UserError, match=r"--decode-cpus='7': CPU 7 is not one this process may run on \(0,1\)"):
        decode_cpus.plan("7", {0, 1}, 1, where="--decode-cpus")
    with pytest.raises(UserError, match="keeps every CPU .* leaves none for tritonserver"):
        decode_cpus.plan("0,1", {0, 1}, 1)
    for bad in ("fast", "1,x", "-1", ","):
        with pytest.raises(UserError, match="give auto, off, or CPU ids"):
            decode_cpus.plan(bad, {0, 1}, 1)


def test_only_a_core_that_names_the_variable_gets_cpus(tmp_path):
    core = tmp_path / "tensorrt_llm" / "1"
    assert not decode_cpus.honours(tmp_path)  # no core model at all
    core.mkdir(parents=True)
    (core / "model.py").write_text("# TensorRT-LLM's own python model\n")
    assert not decode_cpus.honours(tmp_path)
    (core / "model.py").write_text("decode_cpus.claim(self.name)  # SPECBUILD_EXECUTOR_CPUS\n")
    assert decode_cpus.honours(tmp_path)


PINNING_CORE = (
    USE_PYTHONPATH
    + '''
import os, threading
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    """Stands in for the reference core: an executor thread that claims SPECBUILD_EXECUTOR_CPUS."""

    def initialize(self, args):
        from specbuild.serve import decode_cpus
        self.seen = {}
        def loop():
            decode_cpus.claim(args["model_name"])
            self.seen["executor"] = sorted(os.sched_getaffinity(0))
        worker = threading.Thread(target=loop)
        worker.start()
        worker.join()

    def execute(self, requests):
        here = sorted(os.sched_getaffinity(0))
        reply = np.array([self.seen["executor"] + [-1] + here], dtype=np.int32).reshape(-1)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("Y", reply)]) for _ in requests]
'''
)


def _repo(root: Path) -> Path:
    for name in ("tensorrt_llm", "postprocessing"):
        python_model(root, name, PINNING_CORE)
    return root


def _seen(server: TritonServer, model: str) -> tuple[list[int], list[int]]:
    """(the CPUs of the model's executor thread, those of its stub's main thread)."""
    data = infer(server, model, [0])
    cut = data.index(-1)
    return data[:cut], data[cut + 1 :]


def _tasks_cpus(pid: int) -> set[frozenset[int]]:
    return {frozenset(os.sched_getaffinity(int(t))) for t in os.listdir(f"/proc/{pid}/task")}


@TWO_CPUS
def test_the_server_runs_beside_the_cpu_kept_for_the_core(tmp_path):
    everywhere = os.sched_getaffinity(0)
    kept = max(everywhere)
    with TritonServer(
        _repo(tmp_path / "repo"), binary=find_tritonserver(None), log_path=tmp_path / "log", decode_cpus="auto"
    ) as server:
        assert server.client_cpus == frozenset(everywhere - {kept})
        assert _tasks_cpus(server.pid) == {server.client_cpus}  # every tritonserver thread
        assert _seen(server, "tensorrt_llm") == ([kept], sorted(server.client_cpus))  # executor / stub main
        # another model named otherwise (as a draft core) claims nothing: it stays with the server
        assert _seen(server, "postprocessing") == (sorted(server.client_cpus), sorted(server.client_cpus))
    assert os.sched_getaffinity(0) == everywhere  # the launching thread got its CPUs back


@TWO_CPUS
def test_off_keeps_nothing(tmp_path):
    everywhere = sorted(os.sched_getaffinity(0))
    with TritonServer(
        _repo(tmp_path / "repo"), binary=find_tritonserver(None), log_path=tmp_path / "log", decode_cpus="off"
    ) as server:
        assert server.client_cpus is None
        assert _seen(server, "tensorrt_llm") == (everywhere, everywhere)


def test_the_command_line_names_a_bad_choice(tmp_path):
    result = CliRunner().invoke(cli, ["serve", str(tmp_path), "--decode-cpus", "4096"])
    assert result.exit_code == 2
    assert "--decode-cpus" in result.output and "4096" in result.output and "not one this process" in result.output
    result = CliRunner().invoke(cli, ["compile", "--help"])
    assert "--decode-cpus" in result.output
