"""Triton `tensorrt_llm` (and `tensorrt_llm_draft`) on the specbuild reference runtime (CPU, PyTorch).

The CPU stand-in for the C++ `tensorrtllm` backend: the same config.pbtxt (only `backend: "python"` differs), the
same parameters (gpt_model_path, decoding_mode, medusa_choices, eagle_choices, lookahead_*,
exclude_input_in_output, max_beam_width, ...) and the same input and output tensors (repository fact sheet
§1.3, §1.4), served by `specbuild.reference.executor.Executor`.

- Decoupled (`model_transaction_policy { decoupled: true }`): in-flight batching. `execute` enqueues and returns;
  one worker thread steps the executor, so a request that arrives while others decode joins at the next step.
  Streaming requests get one response per step with the new tokens; others one response at the end. A request
  with batch > 1 gets responses per row (`batch_index`), the last one flagged final.
- Not decoupled: `execute` runs the requests Triton hands it as one executor batch and answers each once.
  As the C++ backend, it refuses `streaming` and request batches > 1 there.
- `stop: true` with the request id of a running request cancels it; a cancelled client request is stopped at
  the next step. A bad request gets an error response naming the tensor; the model stays healthy.

Outputs follow the C++ backend: output_ids [1, beams, tokens] (the prompt first unless exclude_input_in_output;
a streamed response holds only its new tokens), sequence_length, and with return_perf_metrics the timing and
speculative counters (acceptance_rate, total_accepted_draft_tokens, total_draft_tokens). The reference runtime
has no paged KV-cache pool: its kv_cache_* metrics are 0.

This model imports specbuild (installed in the server's Python, or on PYTHONPATH: the stub's embedded Python
ignores that variable, so its entries are added to sys.path here).
"""

import json
import os
import sys
import threading
import time
import traceback

import numpy as np
import triton_python_backend_utils as pb_utils
from model_parameters import ParameterError, bool_parameter, int_parameter, parameter


def _use_pythonpath():
    for entry in reversed(os.environ.get("PYTHONPATH", "").split(os.pathsep)):
        if entry and entry not in sys.path:
            sys.path.insert(0, entry)


_use_pythonpath()

# Inputs of the C++ model that the reference runtime does not implement: refused when given with a value.
UNSUPPORTED_INPUTS = (
    "encoder_input_features", "encoder_output_lengths", "decoder_input_ids", "decoder_input_lengths",
    "draft_acceptance_threshold", "runtime_top_p_min", "runtime_top_p_decay", "runtime_top_p_reset_ids",
    "prompt_embedding_table", "prompt_table_extra_ids", "prompt_vocab_size", "cross_attention_mask",
    "mrope_rotary_cos_sin", "mrope_position_deltas", "lora_task_id", "lora_weights", "lora_config",
    "context_phase_params", "skip_cross_attn_blocks", "retention_token_range_starts", "retention_token_range_ends",
    "retention_token_range_priorities", "retention_token_range_durations_ms", "retention_decode_priority",
    "retention_decode_duration_ms", "guided_decoding_guide_type", "guided_decoding_guide", "lookahead_window_size",
    "lookahead_ngram_size", "lookahead_verification_set_size",
)
# Inputs that only shape beam search (ignored at beam width 1, as the C++ backend does).
BEAM_ONLY_INPUTS = ("len_penalty", "early_stopping", "beam_search_diversity_rate")


class RequestError(Exception):
    """A bad request: answered with an error response naming the tensor."""


def word_list(array):
    """One row of the [2, L] word-list format -> list of words (token id lists)."""
    if array is None or array.size == 0:
        return []
    array = array.reshape(2, -1)
    ids, offsets = array[0].tolist(), array[1].tolist()
    words, start = [], 0
    for end in offsets:
        if end < 0:
            break
        if end > start:
            words.append([int(t) for t in ids[start:end]])
        start = end
    return words


class Inputs:
    """The input tensors of one Triton request, row by row."""

    def __init__(self, request):
        self.request = request
        self.cache = {}

    def array(self, name):
        if name not in self.cache:
            tensor = pb_utils.get_input_tensor_by_name(self.request, name)
            self.cache[name] = None if tensor is None else tensor.as_numpy()
        return self.cache[name]

    def given(self, name):
        a = self.array(name)
        return a is not None and a.size > 0

    def scalar(self, name, row, default=None, kind=int):
        a = self.array(name)
        if a is None or a.size == 0:
            return default
        flat = a.reshape(a.shape[0], -1) if a.ndim > 0 else a.reshape(1, 1)
        if row >= flat.shape[0] or flat.shape[1] == 0:
            return default
        return kind(flat[row, 0])

    def rows(self):
        a = self.array("input_ids")
        if a is None:
            raise RequestError("input_ids is missing (this model decodes text prompts; encoder inputs are not "
                               "supported by the reference runtime)")
        return a.shape[0] if a.ndim > 1 else 1


class Job:
    """One row of one Triton request, as one executor request."""

    def __init__(self, request, row, rows, group, streaming, exclude, input_ids, flags):
        self.request = request
        self.row = row
        self.rows = rows
        self.group = group  # shared by the rows of one Triton request: {"left": n, "sender": ...}
        self.streaming = streaming
        self.exclude = exclude
        self.input_ids = input_ids
        self.flags = flags  # return_perf_metrics, return_num_input_tokens, return_num_output_tokens
        self.rid = None
        self.tokens = []
        self.stats = None
        self.arrival_ns = time.time_ns()
        self.first_scheduled_ns = None
        self.first_token_ns = None
        self.last_token_ns = None
        self.triton_id = request.request_id() or ""
        # Send only what the request asked for: the python backend (Triton <= 24.11) drops other tensors of a
        # decoupled response inside ResponseSender.send without the GIL, freeing their numpy arrays unsafely
        # (python_backend PR #390) — an intermittent stub crash under load.
        self.wanted = set(request.requested_output_names())


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.name = args["model_name"]
        try:
            self.configure(config)
        except ParameterError as e:
            raise pb_utils.TritonModelException(f"{self.name}: {e}") from None

    def configure(self, config):
        self.decoupled = pb_utils.using_decoupled_model_transaction_policy(config)
        declared = {t["name"] for t in config.get("input", [])}
        self.min_tokens_name = "min_length" if "min_length" in declared else "min_tokens"
        self.seed_name = "random_seed" if "random_seed" in declared else "seed"
        self.default_exclude = bool_parameter(config, "exclude_input_in_output", False)
        beam = int_parameter(config, "max_beam_width")
        if beam not in (None, 1):
            raise pb_utils.TritonModelException(f"{self.name}: max_beam_width={beam}, but the reference runtime "
                                                "decodes with beam width 1 — set max_beam_width 1")
        engine_dir = parameter(config, "gpt_model_path")
        if engine_dir is None or not os.path.isdir(engine_dir):
            raise pb_utils.TritonModelException(f"{self.name}: gpt_model_path {engine_dir!r} is not an engine folder "
                                                "— build the engines (specbuild compile) and point it there")
        from specbuild.reference.engine import load_engine
        from specbuild.reference.executor import Executor

        overrides = self.decoding_overrides(config, engine_dir)
        self.engine = load_engine(engine_dir, decoding_overrides=overrides or None)
        self.executor = Executor(self.engine)
        self.jobs = {}  # executor request id -> Job
        self.lock = threading.Condition()
        self.running = True
        self.worker = None
        if self.decoupled:
            self.worker = threading.Thread(target=self.loop, name=f"{self.name}-executor", daemon=True)
            self.worker.start()

    def decoding_overrides(self, config, engine_dir):
        """The C++ backend's decoding parameters, as overrides of the engine's specbuild.decoding."""
        from specbuild.engine_facts import SpecMode, read_engine_config
        from specbuild.reference.dialect import ParameterProblem, overrides

        engine_config = read_engine_config(engine_dir)
        mode = SpecMode.parse(engine_config["build_config"].get("speculative_decoding_mode", 1))
        method = (engine_config.get("specbuild") or {}).get("method", "none")
        try:
            return overrides(lambda key: parameter(config, key), lambda key: bool_parameter(config, key, None),
                             lambda key: int_parameter(config, key), mode, method)
        except ParameterProblem as e:
            raise pb_utils.TritonModelException(f"{self.name}: {e} (engine {engine_dir})") from None

    # --- requests -> executor requests ---------------------------------------------------------------------
    def make_jobs(self, request, group):
        from specbuild.reference.executor import Request

        x = Inputs(request)
        for name in UNSUPPORTED_INPUTS:
            if x.given(name):
                raise RequestError(f"input {name} is not supported by the reference runtime")
        rows = x.rows()
        if rows > 1 and not self.decoupled:
            raise RequestError("Batch size > 1 requires the tensorrt_llm backend to be using decoupled transaction "
                               "policy")
        ids = x.array("input_ids").reshape(rows, -1)
        jobs = []
        for row in range(rows):
            streaming = bool(x.scalar("streaming", row, False, bool))
            if streaming and not self.decoupled:
                raise RequestError("Streaming is only supported if model is deployed using decoupled mode.")
            for name, default in (("beam_width", 1), ("num_return_sequences", 1)):
                value = x.scalar(name, row, default)
                if value not in (default, 0):
                    raise RequestError(f"{name}={value}: the reference runtime decodes one sequence with beam width 1")
            for name in ("return_log_probs", "return_context_logits", "return_generation_logits"):
                if x.scalar(name, row, False, bool):
                    raise RequestError(f"{name} is not supported by the reference runtime")
            for name, neutral in (("repetition_penalty", 1.0), ("presence_penalty", 0.0), ("frequency_penalty", 0.0)):
                value = x.scalar(name, row, neutral, float)
                if value != neutral:
                    raise RequestError(f"{name}={value} is not supported by the reference runtime (only {neutral})")
            min_tokens = x.scalar(self.min_tokens_name, row, 0)
            if min_tokens > 1:
                raise RequestError(f"{self.min_tokens_name}={min_tokens} is not supported by the reference runtime")
            if x.given("embedding_bias") and np.any(x.array("embedding_bias").reshape(rows, -1)[row] != 0):
                raise RequestError("embedding_bias is not supported by the reference runtime")
            length = x.scalar("input_lengths", row, None)
            if length is None:
                raise RequestError("input_lengths is missing")
            if not 0 < length <= ids.shape[1]:
                raise RequestError(f"input_lengths={length} does not fit input_ids of length {ids.shape[1]}")
            output_len = x.scalar("request_output_len", row, None)
            if output_len is None:
                raise RequestError("request_output_len is missing")
            input_ids = [int(t) for t in ids[row, :length]]
            drafts = None
            if x.given("draft_input_ids"):
                drafts = [int(t) for t in x.array("draft_input_ids").reshape(rows, -1)[row]]
            draft_logits = None
            if x.given("draft_logits"):
                logits = x.array("draft_logits")
                draft_logits = logits.reshape((rows,) + logits.shape[-2:])[row].astype(np.float32)
            exclude = x.scalar("exclude_input_in_output", row, self.default_exclude, bool)
            stop = x.array("stop_words_list")
            bad = x.array("bad_words_list")
            req = Request(
                input_ids=input_ids, max_new_tokens=int(output_len), sampling=self.sampling(x, row),
                end_id=x.scalar("end_id", row, None), pad_id=x.scalar("pad_id", row, None),
                stop_words=word_list(stop.reshape((rows,) + stop.shape[-2:])[row]) if stop is not None and stop.size else [],
                bad_words=word_list(bad.reshape((rows,) + bad.shape[-2:])[row]) if bad is not None and bad.size else [],
                draft_tokens=drafts, draft_logits=draft_logits)
            flags = {name: bool(x.scalar(name, row, False, bool)) for name in
                     ("return_perf_metrics", "return_num_input_tokens", "return_num_output_tokens")}
            jobs.append((Job(request, row, rows, group, streaming, exclude, input_ids, flags), req))
        return jobs

    def sampling(self, x, row):
        """TensorRT-LLM's sampling semantics: greedy unless top_k > 1 or top_p > 0 asks for sampling; temperature
        then scales the logits (default 1.0). temperature 0 or top_k 1 is greedy."""
        from specbuild.reference.executor import SamplingConfig

        top_k = x.scalar("runtime_top_k", row, 0)
        top_p = x.scalar("runtime_top_p", row, 0.0, float)
        temperature = x.scalar("temperature", row, None, float)
        seed = x.scalar(self.seed_name, row, None)
        samples = top_k > 1 or top_p > 0.0
        if not samples or top_k == 1 or temperature == 0.0:
            return SamplingConfig(temperature=0.0, top_k=0, top_p=1.0, seed=seed)
        return SamplingConfig(temperature=1.0 if temperature is None else temperature, top_k=max(top_k, 0),
                              top_p=top_p if 0.0 < top_p <= 1.0 else 1.0, seed=seed)

    # --- responses ---------------------------------------------------------------------------------------------
    def response(self, job, tokens, final):
        """One response: output_ids [1, 1, n], sequence_length [1, 1], and the asked-for metrics."""
        out = [pb_utils.Tensor("output_ids", np.array(tokens, dtype=np.int32).reshape(1, 1, -1)),
               pb_utils.Tensor("sequence_length", np.array([[len(tokens)]], dtype=np.int32))]
        if job.rows > 1:
            out.append(pb_utils.Tensor("batch_index", np.array([[job.row]], dtype=np.int32)))
        if job.flags["return_perf_metrics"]:
            stats = job.stats
            ints = {"kv_cache_alloc_new_blocks": 0, "kv_cache_reused_blocks": 0, "kv_cache_alloc_total_blocks": 0,
                    "total_accepted_draft_tokens": stats.total_accepted_draft_tokens if stats else 0,
                    "total_draft_tokens": stats.total_draft_tokens if stats else 0}
            for name, value in ints.items():
                out.append(pb_utils.Tensor(name, np.array([[value]], dtype=np.int32)))
            times = {"arrival_time_ns": job.arrival_ns, "first_scheduled_time_ns": job.first_scheduled_ns,
                     "first_token_time_ns": job.first_token_ns, "last_token_time_ns": job.last_token_ns}
            for name, value in times.items():
                out.append(pb_utils.Tensor(name, np.array([[value or 0]], dtype=np.int64)))
            rate = stats.acceptance_rate if stats else 0.0
            out.append(pb_utils.Tensor("acceptance_rate", np.array([[rate]], dtype=np.float32)))
        if job.flags["return_num_input_tokens"]:
            out.append(pb_utils.Tensor("num_input_tokens", np.array([[len(job.input_ids)]], dtype=np.int32)))
        if job.flags["return_num_output_tokens"]:
            out.append(pb_utils.Tensor("num_output_tokens", np.array([[len(job.tokens)]], dtype=np.int32)))
        return pb_utils.InferenceResponse(output_tensors=[t for t in out if t.name() in job.wanted])

    def full_output(self, job):
        return job.tokens if job.exclude else job.input_ids + job.tokens

    def on_event(self, job, event, step_start, step_end):
        """Record one executor event; returns the tokens to stream now (None: nothing to send)."""
        if job.first_scheduled_ns is None:
            job.first_scheduled_ns = step_start
        job.stats = event.stats
        if event.new_tokens:
            job.tokens.extend(event.new_tokens)
            job.first_token_ns = job.first_token_ns or step_end
            job.last_token_ns = step_end
        return event.new_tokens

    # --- decoupled: the worker thread --------------------------------------------------------------------------
    def loop(self):
        while True:
            with self.lock:
                while self.running and not self.executor.has_work():
                    self.lock.wait(timeout=0.5)
                if not self.running:
                    return
                for rid, job in list(self.jobs.items()):
                    sender = job.group["sender"]
                    try:
                        gone = sender is not None and sender.is_cancelled()
                    except Exception:  # noqa: BLE001 - the request is gone: stop decoding it, keep the loop alive
                        gone = True
                    if gone:
                        self.executor.cancel(rid)
            start = time.time_ns()
            try:
                events = self.executor.step()
            except Exception as e:  # noqa: BLE001 - a runtime failure ends the requests, not the model
                self.fail_all(f"{type(e).__name__}: {e}")
                traceback.print_exc()
                continue
            end = time.time_ns()
            for event in events:
                with self.lock:
                    job = self.jobs.get(event.request_id)
                if job is None:
                    continue
                try:
                    self.deliver(job, event, start, end)
                except Exception:  # noqa: BLE001 - e.g. the client went away
                    traceback.print_exc()

    def deliver(self, job, event, start, end):
        new = self.on_event(job, event, start, end)
        last = False
        if event.finished:
            with self.lock:
                self.jobs.pop(event.request_id, None)
                job.group["left"] -= 1
                last = job.group["left"] == 0
        flags = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL if last else 0
        sender = job.group["sender"]
        if job.streaming:
            if new:
                sender.send(self.response(job, new, event.finished), flags=flags)
            elif last:
                sender.send(flags=flags)
        elif event.finished:
            sender.send(self.response(job, self.full_output(job), True), flags=flags)

    def fail_all(self, message):
        with self.lock:
            jobs, self.jobs = list(self.jobs.items()), {}
        groups = {}
        for rid, job in jobs:
            self.executor.cancel(rid)
            groups[id(job.group)] = job.group
        for group in groups.values():
            try:
                group["sender"].send(pb_utils.InferenceResponse(error=pb_utils.TritonError(message)),
                                     flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            except Exception:  # noqa: BLE001
                pass

    def execute(self, requests):
        if not self.decoupled:
            return self.execute_batch(requests)
        for request in requests:
            sender = request.get_response_sender()
            try:
                if self.is_stop(request):
                    self.stop_request(request.request_id())
                    sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                    continue
                group = {"sender": sender, "left": 0}
                jobs = self.make_jobs(request, group)
                group["left"] = len(jobs)
                with self.lock:
                    try:
                        for job, req in jobs:
                            job.rid = self.executor.enqueue(req)
                            self.jobs[job.rid] = job
                    except Exception:
                        # A later row is refused: withdraw the rows already queued, so that nothing answers (or
                        # asks is_cancelled of) this sender after the error response below closes it.
                        for job, _ in jobs:
                            if job.rid is not None and self.jobs.pop(job.rid, None) is not None:
                                self.executor.cancel(job.rid)
                        raise
                    self.lock.notify()
            except Exception as e:  # noqa: BLE001 - RequestError, UserError from the executor's checks, ...
                sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError(self.message(e))),
                            flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None

    def is_stop(self, request):
        tensor = pb_utils.get_input_tensor_by_name(request, "stop")
        return tensor is not None and tensor.as_numpy().size > 0 and bool(tensor.as_numpy().reshape(-1)[0])

    def stop_request(self, triton_id):
        if not triton_id:
            return
        with self.lock:
            for rid, job in self.jobs.items():
                if job.triton_id == triton_id:
                    self.executor.cancel(rid)
            self.lock.notify()

    def message(self, e):
        text = str(e) or type(e).__name__
        return text if isinstance(e, RequestError) or type(e).__name__ == "UserError" else f"{type(e).__name__}: {text}"

    # --- not decoupled: batch-execute what Triton hands us ----------------------------------------------------
    def execute_batch(self, requests):
        responses = [None] * len(requests)
        jobs = {}
        for i, request in enumerate(requests):
            try:
                if self.is_stop(request):
                    responses[i] = pb_utils.InferenceResponse(output_tensors=[])
                    continue
                for job, req in self.make_jobs(request, {"sender": None, "left": 1}):
                    job.index = i
                    jobs[self.executor.enqueue(req)] = job
            except Exception as e:  # noqa: BLE001
                responses[i] = pb_utils.InferenceResponse(error=pb_utils.TritonError(self.message(e)))
        try:
            while jobs:
                for rid, job in jobs.items():
                    if job.request.is_cancelled():
                        self.executor.cancel(rid)
                start = time.time_ns()
                events = self.executor.step()
                end = time.time_ns()
                for event in events:
                    job = jobs.get(event.request_id)
                    if job is None:
                        continue
                    self.on_event(job, event, start, end)
                    if event.finished:
                        del jobs[event.request_id]
                        responses[job.index] = self.response(job, self.full_output(job), True)
        except Exception as e:  # noqa: BLE001
            traceback.print_exc()
            for rid, job in jobs.items():
                self.executor.cancel(rid)
                responses[job.index] = pb_utils.InferenceResponse(
                    error=pb_utils.TritonError(f"{type(e).__name__}: {e}"))
            while self.executor.has_work():  # drain the cancellations
                try:
                    self.executor.step()
                except Exception:  # noqa: BLE001
                    break
        return responses

    def finalize(self):
        with self.lock:
            self.running = False
            self.lock.notify_all()
        if self.worker is not None:
            self.worker.join(timeout=10)
