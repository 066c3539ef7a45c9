"""`specbuild serve`: run tritonserver in the foreground on top of `specbuild.serve.TritonServer` — say where its
log goes, wait until every model is ready (a spinner on a terminal, a progress line every 15 s in a log, as
compile's steps: specbuild.output.steps), print the endpoints, and stop the server by its own PID on Ctrl-C or
SIGTERM (both are the normal way to end it: exit 0). With explicit model control it prints the key that opens the
model-repository API. The banner goes to stdout, one whole line each (scripts read `serving … pid N`, the
`  HTTP     http://…` line and `Ctrl-C stops the server.`); the rest to stderr."""

from __future__ import annotations

import time
from pathlib import Path

from specbuild.facts import metrics
from specbuild.errors import UserError
from specbuild.output.steps import Stages
from specbuild.serve.binary import find_tritonserver
from specbuild.serve.decode_cpus import cpu_list
from specbuild.serve.server import ADMIN_HEADER, GRPC_ADMIN_HEADER, LAUNCH_SCRIPT, TritonServer
from specbuild.processes.signals import sigterm_raises


ENGINE_BODY = '{"text_input": "def add(a, b):", "max_tokens": 16}'
LLM_API_BODY = '{"text_input": "def add(a, b):", "sampling_param_max_tokens": 16}'  # llmapi config.pbtxt@c8c6df0


def _serving_hint(repository: Path) -> tuple[str, str] | None:
    """The model to generate with and a request body for it: the BLS when it runs the speculative loop
    (draft-target, prompt lookup), else the ensemble; an llm-api repository's one model (tensorrt_llm with its
    model.yaml) takes the llmapi inputs."""
    if (repository / "tensorrt_llm" / "1" / "model.yaml").is_file():
        return "tensorrt_llm", LLM_API_BODY
    bls = repository / "tensorrt_llm_bls" / "config.pbtxt"
    if bls.is_file() and "speculative_method" in bls.read_text(errors="replace"):
        return "tensorrt_llm_bls", ENGINE_BODY
    for model in ("ensemble", "tensorrt_llm_bls"):
        if (repository / model / "config.pbtxt").is_file():
            return model, ENGINE_BODY
    return None


def serve_until_interrupted(
    repository: Path,
    *,
    tritonserver: Path | None,
    host: str,
    http_port: int | None,
    grpc_port: int | None,
    metrics_port: int | None,
    model_control: str,
    load_models: list[str],
    log_path: Path | None,
    timeout_s: float,
    console,
    out,
    decode_cpus: str = "auto",
    log_dir: Path | None = None,
    stages: Stages | None = None,
) -> int:
    """Serve until interrupted. Returns the exit code: 0 after a clean stop, 1 when the server died by itself.
    UserError (exit 2) for a missing repository, a taken port, or models that fail to load. The log: `log_path`,
    else a new file in `log_dir`, else in the repository's log folder beside it (serve/log_files.py). `stages`:
    the step that waits for the server (default: compile's kind, on `console`)."""
    repository = Path(repository)
    if not repository.is_dir():
        raise UserError(
            f"{repository}: no such model repository — write one with `specbuild compile RECIPE` "
            "(it goes to triton_repo/<name>) or give the path of a Triton model repository"
        )
    binary = find_tritonserver(tritonserver)
    # A GPU repository starts through its launch script (MPI ranks, orchestrator mode for draft-target), unless only
    # some models are loaded explicitly (e.g. its python models on a CPU machine).
    script = repository / LAUNCH_SCRIPT
    launcher = script if script.is_file() and model_control == "none" else None
    server = TritonServer(
        repository,
        host=host,
        http_port=http_port,
        grpc_port=grpc_port,
        metrics_port=metrics_port,
        binary=binary,
        model_control=model_control,
        load_models=load_models,
        log_path=log_path,
        log_dir=log_dir,
        launcher=launcher,
        decode_cpus=decode_cpus,
    )
    if model_control == "none" and not any((d / "config.pbtxt").is_file() for d in repository.iterdir() if d.is_dir()):
        what = (
            "a Hugging Face checkpoint, not a model repository"
            if (repository / "config.json").is_file()
            else "no model (no <model>/config.pbtxt in it)"
        )
        raise UserError(
            f"{repository}: {what} — serve the repository `specbuild compile RECIPE` writes (triton_repo/<name>)"
        )
    with sigterm_raises():
        return _serve(server, binary, repository, timeout_s, console, out, stages or Stages(console))


def _serve(server, binary, repository: Path, timeout_s: float, console, out, stages: Stages) -> int:
    try:
        console.print(f"tritonserver's log: {server.log_path}")
        with stages.stage(f"start {binary.describe()} on {repository}") as progress:
            progress("starting")
            server.start(timeout_s=timeout_s, progress=progress)
        models = sorted(e["name"] for e in server.repository_index() if e.get("state") == "READY" and "name" in e)
        out.print(f"serving {repository} with {binary.describe()}, pid {server.pid}")
        out.print(f"  HTTP     http://{server.http_address}")
        out.print(f"  gRPC     {server.grpc_url}")
        out.print(f"  metrics  {server.metrics_url}")
        out.print(f"  models   {', '.join(models)} (ready)")
        out.print(f"  log      {server.log_path}")
        if server.cpu_split is not None:
            out.print(
                f"  CPUs     decoding on {cpu_list(server.cpu_split.decode)}, the rest of the server on "
                f"{cpu_list(server.cpu_split.rest)} (--decode-cpus)"
            )
        if server.admin_key:  # explicit model control: loading a model may upload code
            out.print("  admin    the model-repository API (index, load, unload) needs this key:")
            out.print(f"    HTTP header    {ADMIN_HEADER}: {server.admin_key}")
            out.print(f"    gRPC metadata  {GRPC_ADMIN_HEADER}: {server.admin_key}")
        hint = _serving_hint(server.repository)
        if hint:
            model, body = hint
            out.print(f"try:  curl -s -X POST http://{server.http_address}/v2/models/{model}/generate -d '{body}'")
        out.print(
            f"validate:  specbuild validate RECIPE --url {server.http_address} --grpc-url {server.grpc_url} "
            f"--metrics-url {server.metrics_url}"
        )
        out.print(f"AL (PromQL):  {metrics.PROMQL_AL}")
        out.print("Ctrl-C stops the server.")
        while server.running():
            time.sleep(0.5)
        code = server.process.returncode if server.process is not None else None
        tail = "\n".join(server.read_log().splitlines()[-10:])
        console.print(
            f"tritonserver exited by itself (exit code {code}); last log lines:\n{tail}\nfull log: {server.log_path}"
        )
        server.stop()
        return 1
    except KeyboardInterrupt:
        console.print(f"stopping tritonserver (pid {server.pid}) …")
        server.stop()
        console.print("stopped")
        return 0
    finally:
        server.stop()
