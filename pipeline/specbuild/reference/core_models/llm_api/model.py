"""Triton `tensorrt_llm` of the llm-api flavour on the specbuild reference runtime (CPU, PyTorch).

The CPU stand-in for NVIDIA's llmapi model (triton_backend/all_models/llmapi/tensorrt_llm/1/model.py@b35ac1b
in TensorRT-LLM): the same config.pbtxt and the same `1/model.yaml`, read the same way — the file is
`<this folder>/$LLM_CONFIG_PATH` (default model.yaml), `triton_config` sets the transaction policy and max batch
size in `auto_complete_config`, and every other key is validated as the LLM's pydantic arguments would (an unknown
key fails model load naming it; specbuild.reference.llmapi_yaml). The Hugging Face checkpoints are loaded here (no
engine folder; specbuild.reference.llmapi_engine), and requests are decoded by the reference `Executor` in one
worker thread: `execute` only enqueues, so requests that arrive while others decode join at the next step
(in-flight batching across concurrent requests, as the LLM batches them; max_batch_size 0 in Triton).

Tensor contract (specbuild.reference.llmapi_contract): text_input[0] is the prompt; `streaming` needs decoupled
("Streaming is only supported in decoupled mode."); a streamed request gets one response per decoding step with
the cumulative text, FINAL on the last; otherwise one FINAL response. With model.yaml's stream_interval N (an LLM
argument, default 1) a streamed request is answered on its first step, every N-th step and its last, as
TensorRT-LLM's PyExecutor creates streaming responses (specbuild.reference.decoder.request.streams_now). Errors are one
FINAL response with text_output ["N/A"] and "Error generating request: <e>". `stop: true` with a request id
cancels that id's live requests (an empty id: "A request id must be provided for request cancellation"); a thread
polls Triton's cancellation every triton_config.cancellation_check_period_ms and answers CANCELLED "Request
cancelled by client". As NVIDIA's 2026 model (model.py@0ebb153), a cancelled request also gets its CANCELLED FINAL
response.

Threads: `execute` (Triton's), the executor thread (decodes, builds and sends responses) and the cancellation
thread. Only one of them at a time calls into triton_python_backend_utils (`PB_LOCK`): reading a request's inputs,
making and sending responses, asking is_cancelled(), logging — ResponseSender.send and is_cancelled() release the
GIL while they work in the stub's shared structures (python_backend src/response_sender.cc, src/pb_cancel.cc). The
soak of this model (bench/README, 'Soak of the llm-api core') saw the stub die of a segmentation fault in
_PyObject_Malloc, once with the three threads inside the stub at once; with the lock it still happened once (the
executor thread making a response tensor, the stub's main thread in its own C++ code): the cause is not found yet.
A fatal signal leaves every thread's Python stack in the server log (faulthandler).

Memory: a finished request's caches and tensors are freed by reference counting when it leaves (no reference
cycles: tests/reference/test_llmapi_served_core.py), and once the executor has been idle for IDLE_TRIM_S after
work the heap's free pages go back to the operating system (specbuild/reference/decoder/heap.py), so the resident size
follows what is live rather than the last burst's peak (bench/README, 'Soak of the llm-api core').

Perf outputs (sampling_param_return_perf_metrics): the reference runtime has no paged KV pool, so the kv_cache_*
values are 0; the times are steady-clock ns at µs resolution; acceptance_rate, total_accepted_draft_tokens and
total_draft_tokens are the executor's real per-request counters (drafted path tokens; accepted / drafted).

This model imports specbuild (installed in the server's Python, or on PYTHONPATH: the stub's embedded Python
ignores that variable, so its entries are added to sys.path here).
"""

import faulthandler
import json
import os
import sys
import threading
import time
import traceback

import numpy as np
import triton_python_backend_utils as pb_utils

MODEL_DIR = os.path.dirname(os.path.abspath(__file__))  # NVIDIA's pb_utils.get_model_dir(): the version folder


def _use_pythonpath():
    for entry in reversed(os.environ.get("PYTHONPATH", "").split(os.pathsep)):
        if entry and entry not in sys.path:
            sys.path.insert(0, entry)


_use_pythonpath()
faulthandler.enable(all_threads=True)  # a fatal signal in the stub leaves every thread's Python stack in the log


PB_LOCK = threading.RLock()  # one thread at a time inside triton_python_backend_utils (module docstring)
IDLE_TRIM_S = 1.0  # the executor idle this long after work: the heap's free pages go back to the OS


def _log(level, message):
    logger = getattr(pb_utils, "Logger", None)
    if logger is None:
        print(f"[tensorrt_llm] {message}", file=sys.stderr, flush=True)
        return
    with PB_LOCK:
        getattr(logger, f"log_{level}")(message)


def _steady_ns():
    return time.monotonic_ns() // 1000 * 1000  # µs resolution, as TensorRT-LLM's timing metrics


class Job:
    """One live request."""

    def __init__(self, request, sender, user_id, req, detok):
        self.request = request
        self.sender = sender
        self.req = req  # LlmApiRequest
        self.detok = detok
        self.user_id = user_id
        self.rid = None
        self.iterations = 0  # decoding steps this request took part in (TensorRT-LLM's py_decoding_iter)
        self.stats = None
        self.arrival_ns = _steady_ns()
        self.first_scheduled_ns = 0
        self.first_token_ns = 0
        self.last_token_ns = 0
        self.lock = threading.Lock()
        self.closed = False  # its FINAL response was sent


class TritonPythonModel:
    @classmethod
    def auto_complete_config(cls, auto_complete_model_config):
        """As NVIDIA's: triton_config's decoupled and max_batch_size into the model config."""
        from specbuild.reference.llmapi_yaml import ModelYamlError, load_yaml, model_yaml_path, triton_config

        path = model_yaml_path(MODEL_DIR)
        try:
            tc = triton_config(load_yaml(path), path)
            auto_complete_model_config.set_model_transaction_policy(dict(decoupled=bool(tc["decoupled"])))
            auto_complete_model_config.set_max_batch_size(int(tc["max_batch_size"]))
        except ModelYamlError as e:
            raise pb_utils.TritonModelException(str(e)) from None
        return auto_complete_model_config

    # ------------------------------------------------------------------------------------------------ load
    def initialize(self, args):
        from specbuild.errors import UserError

        self.name = args.get("model_name", "tensorrt_llm")
        try:
            self.load()
        except UserError as e:
            raise pb_utils.TritonModelException(f"{self.name}: {e}") from None

    def load(self):
        from specbuild.reference.llmapi_yaml import model_yaml_path, read_model_yaml

        self.settings = s = read_model_yaml(model_yaml_path(MODEL_DIR))  # refused before torch is imported
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        import torch
        from transformers import AutoTokenizer

        from specbuild.reference.decoder.executor import Executor
        from specbuild.reference.llmapi_engine import build_engines

        torch.set_num_threads(max(1, int(os.environ.get("SPECBUILD_TORCH_THREADS", "1"))))
        self.decoupled = s.decoupled  # from model.yaml, as NVIDIA's initialize
        for note in s.notes:
            _log("info", f"[specbuild] {s.path}: {note}")
        self.tokenizer = AutoTokenizer.from_pretrained(
            str(s.tokenizer_dir),
            legacy=False,
            padding_side="left",
            truncation_side="left",
            trust_remote_code=s.trust_remote_code,
        )
        if self.tokenizer.eos_token_id is None:
            raise pb_utils.TritonModelException(
                f"{self.name}: the tokenizer in {s.tokenizer_dir} has no eos token, "
                "so generation has no end id — use a tokenizer with an eos_token"
            )
        self.end_id = int(self.tokenizer.eos_token_id)
        target, draft = build_engines(s)
        self.executor = Executor(target, draft, enable_kv_cache_reuse=s.enable_kv_cache_reuse)
        _log(
            "info",
            f"[specbuild] serving {s.model_dir} with {self.executor.method_name} "
            f"(speculative_config {s.decoding_type or 'none'}) from {s.path}",
        )
        self.jobs = {}  # executor request id -> Job
        self.cond = threading.Condition()
        self.running = True
        self.worker = threading.Thread(target=self.loop, name=f"{self.name}-executor", daemon=True)
        self.worker.start()
        self.canceller = threading.Thread(target=self.cancellation_loop, name=f"{self.name}-cancel", daemon=True)
        self.canceller.start()

    # ------------------------------------------------------------------------------------------------ requests
    def execute(self, requests):
        from specbuild.reference.llmapi_contract import is_stop

        for request in requests:
            with PB_LOCK:
                sender = request.get_response_sender()
                user_id = request.request_id() or ""
                inputs = {t.name(): t.as_numpy() for t in request.inputs()}
                parameters = request.parameters()
            try:
                if is_stop(inputs.get):
                    self.stop_request(user_id, sender)
                    continue
                self.enqueue(request, sender, user_id, inputs.get, frozenset(json.loads(parameters or "{}")))
            except Exception as e:  # noqa: BLE001 - every failure is answered, the model stays healthy
                self.send_error(sender, e)
        return None

    def enqueue(self, request, sender, user_id, get, parameters=frozenset()):
        from specbuild.reference.decoder.executor import Request, SamplingConfig
        from specbuild.reference.llmapi_contract import Detokenizer, RequestError, parse_request

        req = parse_request(get, parameters)
        if req.streaming and not self.decoupled:
            raise RequestError("Streaming is only supported in decoupled mode.")
        s = self.settings
        ids = self.tokenizer.encode(req.prompt, add_special_tokens=True)
        if len(ids) > s.max_num_tokens:  # tensorrt_llm/llmapi/llm.py _check_arguments (PyTorch backend)
            raise RequestError(
                f"The sum of prompt length ({float(len(ids))}), query length (0) should not exceed "
                f"max_num_tokens ({s.max_num_tokens})"
            )
        if len(ids) > s.max_input_len:
            raise RequestError(
                f"the prompt has {len(ids)} tokens, more than max_input_len ({s.max_input_len}) in "
                f"{s.path.name} — shorten it"
            )
        if len(ids) + req.max_tokens > s.max_seq_len:
            raise RequestError(
                f"prompt ({len(ids)} tokens) + max_tokens ({req.max_tokens}) exceeds max_seq_len "
                f"({s.max_seq_len}) in {s.path.name} — ask for fewer tokens"
            )
        # TorchSampler's order: penalties, then temperature (reference/decoder/sampling.py)
        sampling = SamplingConfig(
            temperature=req.temperature,
            top_k=req.top_k,
            top_p=req.top_p,
            seed=req.seed,
            presence_penalty=req.presence_penalty,
            frequency_penalty=req.frequency_penalty,
            penalties_before_temperature=True,
        )
        job = Job(request, sender, user_id, req, Detokenizer(self.tokenizer, ids, req))
        with self.cond:
            job.rid = self.executor.enqueue(
                Request(input_ids=ids, max_new_tokens=req.max_tokens, sampling=sampling, end_id=self.end_id)
            )
            self.jobs[job.rid] = job
            self.cond.notify()

    # ------------------------------------------------------------------------------------------------ responses
    def response_tensors(self, job, final, finish_reason):
        """The response's tensors by name (numpy; made into a pb_utils response by `send`)."""
        from specbuild.reference.llmapi_contract import response_tensors

        text = job.detok.text(final=final)
        return response_tensors(job.req, text, finish_reason, job.detok.stop_reason, self.perf(job))

    def perf(self, job):
        if not job.req.return_perf_metrics:
            return None
        st = job.stats
        return {
            "kv_cache_reused_block": 0,
            "kv_cache_hit_rate": 0.0,
            "kv_cache_alloc_new_blocks": 0,
            "kv_cache_alloc_total_blocks": 0,
            "kv_cache_missed_block": 0,
            "arrival_time_ns": job.arrival_ns,
            "first_scheduled_time_ns": job.first_scheduled_ns,
            "first_token_time_ns": job.first_token_ns,
            "last_token_time_ns": job.last_token_ns,
            "acceptance_rate": st.acceptance_rate if st else 0.0,
            "total_accepted_draft_tokens": st.total_accepted_draft_tokens if st else 0,
            "total_draft_tokens": st.total_draft_tokens if st else 0,
        }

    def send(self, job, tensors=None, final=False, error=None):
        """Send on a job's sender unless its FINAL response went out already (cancellation races the worker):
        the tensors (name -> numpy array), or an error (a pb_utils.TritonError made under PB_LOCK by `error()`)."""
        with job.lock:
            if job.closed:
                return
            job.closed = final
            flags = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL if final else 0
            with PB_LOCK:
                if error is not None:
                    job.sender.send(pb_utils.InferenceResponse(error=error()), flags=flags)
                elif tensors is None:
                    job.sender.send(flags=flags)
                else:
                    job.sender.send(
                        pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(n, a) for n, a in tensors.items()]),
                        flags=flags,
                    )

    def send_error(self, sender, e):
        """NVIDIA's except clause: one FINAL response, text_output ["N/A"], "Error generating request: <e>"; a
        request the model refuses (RequestError, UserError) as INVALID_ARG (HTTP 400, gRPC INVALID_ARGUMENT),
        anything else as INTERNAL."""
        from specbuild.reference.llmapi_contract import RequestError, error_text

        refused = isinstance(e, RequestError) or type(e).__name__ == "UserError"
        if not refused:
            traceback.print_exc()
        _log("error", f"[trtllm] {error_text(e)}")
        with PB_LOCK:
            na = pb_utils.Tensor("text_output", np.array([b"N/A"], dtype=np.object_))
            code = getattr(pb_utils.TritonError, "INVALID_ARG" if refused else "INTERNAL", None)
            error = pb_utils.TritonError(error_text(e)) if code is None else pb_utils.TritonError(error_text(e), code)
            sender.send(
                pb_utils.InferenceResponse(output_tensors=[na], error=error),
                flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
            )

    @staticmethod
    def cancelled_error():
        code = getattr(pb_utils.TritonError, "CANCELLED", None)
        if code is None:
            return pb_utils.TritonError("Request cancelled by client")
        return pb_utils.TritonError("Request cancelled by client", code)

    def cancelled(self, job):
        """CANCELLED + FINAL on a job's own sender (after Triton's cancellation or a stop request)."""
        try:
            self.send(job, final=True, error=self.cancelled_error)
        except Exception:  # noqa: BLE001 - the client may be gone
            pass

    # ------------------------------------------------------------------------------------------------ the worker
    def loop(self):
        from specbuild.reference.decoder import heap
        from specbuild.serve import decode_cpus

        decode_cpus.claim(self.name)  # the CPUs the launcher kept for this thread (SPECBUILD_EXECUTOR_CPUS)
        worked = False  # steps since the heap was last trimmed
        while True:
            with self.cond:
                idle_s = 0.0
                while self.running and not self.executor.has_work() and not (worked and idle_s >= IDLE_TRIM_S):
                    self.cond.wait(timeout=0.5)
                    idle_s += 0.5
                if not self.running:
                    return
                busy = self.executor.has_work()
            # idle since IDLE_TRIM_S after work: the freed pages go back (specbuild/reference/decoder/heap.py)
            if not busy:
                heap.trim_heap()
                worked = False
                continue
            worked = True
            start = _steady_ns()
            try:
                events = self.executor.step()
            except Exception as e:  # noqa: BLE001 - a runtime failure ends the requests, not the model
                traceback.print_exc()
                self.fail_all(e)
                continue
            end = _steady_ns()
            for event in events:
                with self.cond:
                    job = self.jobs.get(event.request_id)
                if job is not None:
                    try:
                        self.deliver(job, event, start, end)
                    except Exception as e:  # noqa: BLE001 - e.g. the client went away: stop decoding for it
                        _log(
                            "warn",
                            f"[specbuild] request {job.user_id or job.rid}: its response could not be sent "
                            f"({type(e).__name__}: {e}); it is cancelled",
                        )
                        with self.cond:
                            if self.jobs.pop(event.request_id, None) is not None and not event.finished:
                                self.executor.cancel(event.request_id)

    def deliver(self, job, event, start, end):
        from specbuild.reference.llmapi_contract import FINISH_REASONS
        from specbuild.reference.decoder.request import streams_now

        job.first_scheduled_ns = job.first_scheduled_ns or start
        job.stats = event.stats
        job.iterations += 1
        stopped = False
        if event.new_tokens:
            stopped = job.detok.add(event.new_tokens)
            job.first_token_ns = job.first_token_ns or end
            job.last_token_ns = end
        finished = event.finished or stopped
        if finished:
            with self.cond:
                if self.jobs.pop(event.request_id, None) is None:
                    return  # cancelled meanwhile: answered already
                if stopped and not event.finished:
                    self.executor.cancel(event.request_id)  # a stop string: nothing more to decode
        reason = "stop" if stopped else FINISH_REASONS.get(event.finish_reason) if finished else None
        if finished or (job.req.streaming and streams_now(job.iterations, self.settings.stream_interval, finished)):
            self.send(job, self.response_tensors(job, finished, reason), final=finished)

    def fail_all(self, e):
        with self.cond:
            jobs, self.jobs = list(self.jobs.items()), {}
            for rid, _ in jobs:
                self.executor.cancel(rid)
        for _, job in jobs:
            with job.lock:
                if job.closed:
                    continue
                job.closed = True
            try:
                self.send_error(job.sender, e)
            except Exception:  # noqa: BLE001
                pass

    # ------------------------------------------------------------------------------------------------ cancellation
    def cancellation_loop(self):
        """NVIDIA's cancellation_loop: poll Triton's is_cancelled() every cancellation_check_period_ms."""
        period = self.settings.cancellation_check_period_ms / 1000.0
        while self.running:
            time.sleep(period)
            with self.cond:
                live = list(self.jobs.items())
            gone = [(rid, job) for rid, job in live if self.is_cancelled(job)]
            with self.cond:
                gone = [(rid, job) for rid, job in gone if self.jobs.pop(rid, None) is not None]
                for rid, _ in gone:
                    self.executor.cancel(rid)
            for _, job in gone:
                self.cancelled(job)

    @staticmethod
    def is_cancelled(job):
        """Triton's is_cancelled() of a job whose FINAL response has not gone out."""
        with job.lock:
            if job.closed:
                return False
            with PB_LOCK:
                return job.request.is_cancelled()

    def stop_request(self, user_id, sender):
        """`stop: true` (tensorrtllm_backend README.md@0b9d7d5, "request cancellation"): abort the live requests with
        that request id."""
        if not user_id:
            with PB_LOCK:
                sender.send(
                    pb_utils.InferenceResponse(
                        error=pb_utils.TritonError("A request id must be provided for request cancellation")
                    ),
                    flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
                )
            return
        with self.cond:
            victims = [(rid, job) for rid, job in self.jobs.items() if job.user_id == user_id]
            for rid, job in victims:
                del self.jobs[rid]
                self.executor.cancel(rid)
            self.cond.notify()
        for _, job in victims:
            self.cancelled(job)
        with PB_LOCK:
            sender.send(
                pb_utils.InferenceResponse(error=self.cancelled_error()),
                flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
            )

    def finalize(self):
        with self.cond:
            self.running = False
            self.cond.notify_all()
        for thread in (getattr(self, "worker", None), getattr(self, "canceller", None)):
            if thread is not None:
                thread.join(timeout=10)
