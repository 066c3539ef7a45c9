"""`specbuild serve` as a user runs it: a child process that serves until Ctrl-C, stops its server by PID, and
reports load errors and user errors with exit code 2."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from serve_helpers import eventually, listening, marked_processes, shm_entries
from validate_toy.repo import write_toy_repo

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.timeout(300)


def _as_from_a_terminal() -> None:
    # a shell that starts pytest in the background leaves SIGINT ignored, and children inherit that: restore the
    # disposition an interactive Ctrl-C meets
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def run_serve(*args: str, **kw) -> subprocess.Popen:
    # a narrow terminal: the addresses, the PID and the commands to copy must still come whole, one per line
    env = dict(os.environ, PYTHONPATH=str(ROOT / "pipeline"), COLUMNS="60")
    return subprocess.Popen(
        [sys.executable, "-m", "specbuild.cli", "serve", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        preexec_fn=_as_from_a_terminal,
        **kw,
    )


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _until_serving(proc: subprocess.Popen, timeout_s: float = 120) -> str:
    lines = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if line.startswith("Ctrl-C stops the server"):
            break
    out = "".join(lines)
    assert "Ctrl-C stops the server" in out, out + (proc.stderr.read() if proc.poll() is not None else "")
    return out


def _ports(out: str) -> list[int]:
    return [int(p) for p in re.findall(r"^  (?:HTTP|gRPC|metrics) +\S*?127\.0\.0\.1:(\d+)", out, re.M)]


@pytest.mark.parametrize(
    "sig, code",
    [(signal.SIGINT, 0), (signal.SIGTERM, 0), (signal.SIGKILL, -signal.SIGKILL)],
    ids=["SIGINT", "SIGTERM", "SIGKILL"],
)
def test_a_signal_leaves_no_process_port_or_shared_memory(tmp_path, sig, code):
    """Ctrl-C and SIGTERM stop `serve` cleanly (exit 0); after SIGKILL its watchdog removes what the server
    left. Counted by the marker every process it started carries, its /dev/shm prefix and its ports."""
    repo = write_toy_repo(tmp_path / "repo", mode="baseline")
    proc = run_serve(str(repo), "--http-port", "0", "--grpc-port", "0", "--metrics-port", "0")
    try:
        out = _until_serving(proc)
        ports = _ports(out)
        assert len(ports) == 3 and all(listening(p) for p in ports)
        assert len(marked_processes(proc.pid)) >= 2 and shm_entries(proc.pid)  # the server, its stubs, regions
        proc.send_signal(sig)
        assert proc.wait(timeout=60) == code
        if sig != signal.SIGKILL:
            assert "stopped" in proc.stderr.read()
        assert eventually(lambda: not marked_processes(proc.pid), 30), marked_processes(proc.pid)
        assert eventually(lambda: not shm_entries(proc.pid), 10), shm_entries(proc.pid)
        assert eventually(lambda: not any(listening(p) for p in ports), 10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_explicit_model_control_prints_the_key_the_repository_api_needs(tmp_path):
    repo = write_toy_repo(tmp_path / "repo", mode="baseline")
    proc = run_serve(
        str(repo),
        "--http-port",
        "0",
        "--grpc-port",
        "0",
        "--metrics-port",
        "0",
        "--model-control",
        "explicit",
        "--load-model",
        "ensemble",
    )
    try:
        out = _until_serving(proc)
        key = re.search(r"^    HTTP header +specbuild-admin-key: (\S+)$", out, re.M).group(1)
        assert re.search(rf"^    gRPC metadata +triton-grpc-protocol-specbuild-admin-key: {re.escape(key)}$", out, re.M)
        http = re.search(r"^  HTTP +(http://\S+)$", out, re.M).group(1)
        for headers, expected in (({}, 403), ({"specbuild-admin-key": key}, 200)):
            req = urllib.request.Request(f"{http}/v2/repository/index", data=b"{}", method="POST", headers=headers)
            try:
                with urllib.request.urlopen(req, timeout=10) as r:
                    status = r.status
            except urllib.error.HTTPError as e:
                status = e.code
            assert status == expected, headers
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_serves_until_ctrl_c_and_stops_the_server(tmp_path):
    repo = write_toy_repo(tmp_path / "repo", mode="baseline")
    proc = run_serve(str(repo), "--http-port", "0", "--grpc-port", "0", "--metrics-port", "0")
    try:
        lines = []
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            if line.startswith("Ctrl-C stops the server"):
                break
        out = "".join(lines)
        assert "Ctrl-C stops the server" in out, out + proc.stderr.read()
        # every line comes whole (never wrapped at the terminal's width): scripts and people copy from them
        pid = int(re.search(r"^serving \S+ with .+, pid (\d+)$", out, re.M).group(1))
        http = re.search(r"^  HTTP +(http://127\.0\.0\.1:\d+)$", out, re.M).group(1)
        assert re.search(r"^  gRPC +127\.0\.0\.1:\d+$", out, re.M) and re.search(r"^  metrics +\S+$", out, re.M)
        assert re.search(
            r"^validate:  specbuild validate RECIPE --url \S+ --grpc-url \S+ --metrics-url "
            r"http://127\.0\.0\.1:\d+/metrics$",
            out,
            re.M,
        )
        assert re.search(
            r"^AL \(PromQL\):  1 \+ .*specbuild_spec_decode_num_accepted_tokens_total.*"
            r"specbuild_spec_decode_num_steps_total.*$",
            out,
            re.M,
        )
        assert "ensemble" in out and "tensorrt_llm" in out
        with urllib.request.urlopen(f"{http}/v2/models/ensemble/ready", timeout=10) as r:
            assert r.status == 200
        assert alive(pid)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0
        assert "stopped" in proc.stderr.read()
        deadline = time.monotonic() + 10
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not alive(pid)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_load_errors_in_plain_words(tmp_path):
    repo = write_toy_repo(tmp_path / "repo", mode="baseline")
    model = repo / "postprocessing" / "1" / "model.py"
    model.write_text(
        "class TritonPythonModel:\n    def initialize(self, args):\n"
        "        raise ValueError('the tokenizer folder /nowhere is missing')\n"
    )
    proc = run_serve(str(repo), "--http-port", "0", "--grpc-port", "0", "--metrics-port", "0")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 2, out + err
    assert "model postprocessing:" in err and "the tokenizer folder /nowhere is missing" in err


def test_user_errors_exit_2(tmp_path):
    proc = run_serve(str(tmp_path / "missing"))
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and "no such model repository" in err
    (tmp_path / "empty").mkdir()
    proc = run_serve(str(tmp_path / "empty"))
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and "no model (no <model>/config.pbtxt in it)" in err
    proc = run_serve(str(ROOT / "checkpoints" / "tiny" / "target"))
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and "a Hugging Face checkpoint, not a model repository" in err
    repo = write_toy_repo(tmp_path / "repo", mode="baseline")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        proc = run_serve(str(repo), "--http-port", str(port), "--grpc-port", "0", "--metrics-port", "0")
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and "already in use" in err
    proc = run_serve(str(repo), "--load-model", "ensemble")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and "--model-control explicit" in err


@pytest.mark.skipif(
    not (ROOT / "checkpoints" / "tiny" / "target" / "config.json").is_file(), reason="checkpoints/tiny not built"
)
def test_serves_the_llm_api_repository_compile_names(tmp_path):
    """What `specbuild compile` of an llm-api recipe tells the user to run: `specbuild serve` on the repository,
    which starts through the repository's launch_triton.sh, served by nvidia-pytriton's CPU tritonserver here
    (the python backend from its cached backend folder), and answers the request it prints."""
    import json

    env = dict(os.environ, PYTHONPATH=str(ROOT / "pipeline"), COLUMNS="200")
    compiled = subprocess.run(
        [
            sys.executable,
            "-m",
            "specbuild.cli",
            "compile",
            str(ROOT / "recipes" / "reference" / "llmapi_prompt_lookup.yaml"),
            "--no-validate",
            "--repo-dir",
            str(tmp_path / "triton_repo"),
            "--engines-dir",
            str(tmp_path / "engines"),
            "--report-dir",
            str(tmp_path / "reports"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert compiled.returncode == 0, compiled.stdout + compiled.stderr
    repo = re.search(r"serve it with: specbuild serve (\S+)", compiled.stderr).group(1)
    assert Path(repo, "launch_triton.sh").is_file() and Path(repo, "tensorrt_llm", "1", "model.yaml").is_file()
    proc = run_serve(repo, "--http-port", "0", "--grpc-port", "0", "--metrics-port", "0")
    try:
        out = _until_serving(proc, timeout_s=300)
        pid = int(re.search(r"^serving \S+ with .+, pid (\d+)$", out, re.M).group(1))
        # started by the script (it spells the repository --model-repository=<its folder>), not directly
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        assert f"--model-repository={Path(repo).resolve()}".encode() in cmdline, cmdline
        assert re.search(r"^  models +tensorrt_llm \(ready\)$", out, re.M), out
        url, body = re.search(r"^try:  curl -s -X POST (\S+) -d '(.+)'$", out, re.M).groups()
        assert url.endswith("/v2/models/tensorrt_llm/generate") and "sampling_param_max_tokens" in body
        req = urllib.request.Request(url, data=body.encode(), headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=120) as r:
            answer = json.loads(r.read())
        prompt = json.loads(body)["text_input"]
        # NVIDIA's llmapi model echoes the prompt unless told otherwise (helpers.py@0df60f9)
        assert answer["text_output"].startswith(prompt) and len(answer["text_output"]) > len(prompt), answer
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
