"""Triton `tensorrt_llm` (and `tensorrt_llm_draft`) on the specbuild reference runtime (CPU, PyTorch).

The CPU stand-in for the C++ `tensorrtllm` backend: the same config.pbtxt (only `backend: "python"` differs), the
same parameters (gpt_model_path, decoding_mode, medusa_choices, eagle_choices, lookahead_*,
exclude_input_in_output, max_beam_width, ...) and the same input and output tensors (TensorRT-LLM
triton_backend/all_models/inflight_batcher_llm/tensorrt_llm/config.pbtxt@2a9abd95), served by
`specbuild.reference.decoder.executor.Executor`.

- In-flight batching, decoupled or not, as the C++ backend batches: `execute` enqueues and returns; one worker
  thread steps the executor, so a request that arrives while others decode joins at the next step.
  Streaming requests get one response per step with the new tokens (built by that thread after its step, sent by
  a second thread while the next step runs); others one response at the end. With the parameter stream_interval N
  (specbuild's, default 1: the recipe's triton.stream_interval; the C++ backend has no such option) a streaming
  request gets a response on its first step, every N-th step and its last, each with the tokens (and log probs) of
  the steps since the one before: TensorRT-LLM's LLM-API rule (specbuild.reference.decoder.request.streams_now).
  Cancellation is polled every cancellation_check_period_ms and the nv_trt_llm_* gauges published every
  stats_check_period_ms, as the C++ backend does. A request with batch > 1 gets responses per row (`batch_index`),
  the last one flagged final.
- Not decoupled (the cores a BLS drives: draft-target, prompt lookup): each request gets exactly one response,
  through its response sender, which the python backend allows a non-decoupled model since Triton 24.06 (python
  backend README, "Decoupled mode"). As the C++ backend, it refuses `streaming` and request batches > 1 there.
- `stop: true` with the request id of a running request cancels it; a cancelled client request is stopped at
  the next step. A bad request gets an error response naming the tensor; the model stays healthy.

Outputs follow the C++ backend: output_ids [1, beams, tokens] (the prompt first unless exclude_input_in_output;
a streamed response holds only its new tokens), sequence_length, with return_log_probs cum_log_probs [1, beams]
(the cumulative log probability so far, the end id's included when the request ends there) and output_log_probs
[1, beams, tokens] (one per generated token, a streamed response's for its new tokens; normalised over the top-k
set with the parameter normalize_log_probs, default true: see specbuild/reference/decoder/sampling.py), and with
return_perf_metrics the timing and speculative counters (acceptance_rate, total_accepted_draft_tokens,
total_draft_tokens). The reference runtime has no paged KV-cache pool: its kv_cache_* outputs count blocks of one
token (kv_cache_reused_blocks: the prompt tokens KV reuse took from a finished request, with enable_kv_cache_reuse).

Inputs follow the C++ backend too: decoder_input_ids / decoder_input_lengths are read for encoder-decoder
models only (`inflight_batcher_llm/src/utils.cc`), so this decoder-only runtime ignores them; sampling values
are checked as TensorRT-LLM's SamplingConfig does (request_checks.py); an input whose feature the reference
runtime does not implement (LoRA, prompt tables, guided decoding, context/generation logits, beam search, ...) is
answered with one sentence naming it. min_tokens (min_length before 0.20), repetition_penalty, presence_penalty and
frequency_penalty are served by every method with TensorRT-LLM's definitions (the reference runtime's
sampling.py), at every verified position given the tokens on that draft path, so speculation stays lossless.

Metrics (serving_metrics.py): the nv_trt_llm_* request, KV-cache, in-flight batcher and iteration gauges, and
specbuild's speculative-decoding counters, labelled with this model's name.

This model imports specbuild (installed in the server's Python, or on PYTHONPATH: the stub's embedded Python
ignores that variable, so its entries are added to sys.path here).
"""

import json
import os
import queue
import sys
import threading
import time
import traceback

import numpy as np
import triton_python_backend_utils as pb_utils
from model_parameters import ParameterError, bool_parameter, int_parameter, parameter
from request_checks import max_tokens_problem, penalty_problems, sampling_problems
from serving_metrics import BatcherMetrics, SpeculationMetrics, metrics_or_none


def _use_pythonpath():
    for entry in reversed(os.environ.get("PYTHONPATH", "").split(os.pathsep)):
        if entry and entry not in sys.path:
            sys.path.insert(0, entry)


_use_pythonpath()

# Inputs of the C++ model whose feature the reference runtime does not implement: refused, in one sentence, when
# given with a value. (decoder_input_ids / decoder_input_lengths are not here: the C++ backend ignores them for
# decoder-only models, and so does this model.)
UNSUPPORTED_INPUTS = {
    "encoder_input_features": "encoder-decoder models",
    "encoder_output_lengths": "encoder-decoder models",
    "draft_acceptance_threshold": "a draft acceptance threshold",
    "runtime_top_p_min": "top-p decay",
    "runtime_top_p_decay": "top-p decay",
    "runtime_top_p_reset_ids": "top-p decay",
    "prompt_embedding_table": "prompt tables (p-tuning, multimodal)",
    "prompt_table_extra_ids": "prompt tables",
    "prompt_vocab_size": "prompt tables",
    "cross_attention_mask": "cross attention",
    "mrope_rotary_cos_sin": "multimodal rotary embeddings",
    "mrope_position_deltas": "multimodal rotary embeddings",
    "lora_task_id": "LoRA adapters",
    "lora_weights": "LoRA adapters",
    "lora_config": "LoRA adapters",
    "context_phase_params": "disaggregated serving",
    "skip_cross_attn_blocks": "cross attention",
    "retention_token_range_starts": "KV-cache retention",
    "retention_token_range_ends": "KV-cache retention",
    "retention_token_range_priorities": "KV-cache retention",
    "retention_token_range_durations_ms": "KV-cache retention",
    "retention_decode_priority": "KV-cache retention",
    "retention_decode_duration_ms": "KV-cache retention",
    "guided_decoding_guide_type": "guided decoding",
    "guided_decoding_guide": "guided decoding",
    "lookahead_window_size": "per-request lookahead settings",
    "lookahead_ngram_size": "per-request lookahead settings",
    "lookahead_verification_set_size": "per-request lookahead settings",
}


class BadRequest(Exception):
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
            raise BadRequest(
                "input_ids is missing (this model decodes text prompts; encoder inputs are not "
                "supported by the reference runtime)"
            )
        return a.shape[0] if a.ndim > 1 else 1


def new_tally():
    return {"context": 0, "generation": 0, "context_tokens": 0}


class RowJob:
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
        self.iterations = 0  # executor steps this row took part in (TensorRT-LLM's py_decoding_iter)
        self.unsent = []  # streaming: tokens of the steps since the last response (see due())
        self.unsent_log_probs = []
        self.tokens = []
        self.log_probs = []  # TokenLogProb per generated token (return_log_probs)
        self.cum_log_prob = 0.0
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
        self.args_version = args.get("model_version", "1")
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
        # output_log_probs over the top-k set (the C++ backend's parameter, default true: MIS L506)
        self.normalize_log_probs = bool_parameter(config, "normalize_log_probs", True)
        beam = int_parameter(config, "max_beam_width")
        if beam not in (None, 1):
            raise pb_utils.TritonModelException(
                f"{self.name}: max_beam_width={beam}, but the reference runtime "
                "decodes with beam width 1 — set max_beam_width 1"
            )
        engine_dir = parameter(config, "gpt_model_path")
        if engine_dir is None or not os.path.isdir(engine_dir):
            raise pb_utils.TritonModelException(
                f"{self.name}: gpt_model_path {engine_dir!r} is not an engine folder "
                "— build the engines (specbuild compile) and point it there"
            )
        import torch

        from specbuild.reference.engine_folder import load_engine
        from specbuild.reference.decoder.executor import Executor

        # One torch thread by default (SPECBUILD_TORCH_THREADS): the core shares the CPUs with tritonserver and the
        # other models' stubs, and OpenMP workers spinning for a skinny decode step only slow everyone down
        torch.set_num_threads(max(1, int(os.environ.get("SPECBUILD_TORCH_THREADS", "1"))))
        overrides = self.decoding_overrides(config, engine_dir)
        self.engine = load_engine(engine_dir, decoding_overrides=overrides or None)
        # TensorRT-LLM's enable_kv_cache_reuse (C++ default true): the BLS rounds resend the text so far as a new
        # request each, and prefill only what is new when the core keeps finished requests' KV
        self.executor = Executor(
            self.engine, enable_kv_cache_reuse=bool_parameter(config, "enable_kv_cache_reuse", True)
        )
        version = str(self.args_version)
        self.spec_metrics = metrics_or_none(lambda: SpeculationMetrics(self.name, version), self.name)
        self.batcher_metrics = metrics_or_none(
            lambda: BatcherMetrics(self.name, version, max_requests=self.engine.limits.max_batch_size), self.name
        )
        self.jobs = {}  # executor request id -> RowJob
        self.lock = threading.Condition()
        self.running = True
        self.worker = self.delivery = None
        self.stats_period_s = int_parameter(config, "stats_check_period_ms", 100, minimum=0) / 1000.0
        self.next_report = 0.0
        self.cancel_period_s = int_parameter(config, "cancellation_check_period_ms", 100, minimum=0) / 1000.0
        self.stream_interval = int_parameter(config, "stream_interval", 1, minimum=1)
        self.next_cancel_check = 0.0
        self.next_handover = 0.0  # the executor thread's: held steps go over at least every stats period
        self.outbox = queue.SimpleQueue()
        self.delivery = threading.Thread(target=self.deliver_loop, name=f"{self.name}-delivery", daemon=True)
        self.delivery.start()
        self.worker = threading.Thread(target=self.loop, name=f"{self.name}-executor", daemon=True)
        self.worker.start()

    def decoding_overrides(self, config, engine_dir):
        """The C++ backend's decoding parameters, as overrides of the engine's specbuild.decoding."""
        from specbuild.facts.engine_facts import SpecMode, read_engine_config
        from specbuild.reference.dialect import ParameterProblem, overrides

        engine_config = read_engine_config(engine_dir)
        mode = SpecMode.parse(engine_config["build_config"].get("speculative_decoding_mode", 1))
        method = (engine_config.get("specbuild") or {}).get("method", "none")
        try:
            return overrides(
                lambda key: parameter(config, key),
                lambda key: bool_parameter(config, key, None),
                lambda key: int_parameter(config, key),
                mode,
                method,
            )
        except ParameterProblem as e:
            raise pb_utils.TritonModelException(f"{self.name}: {e} (engine {engine_dir})") from None

    # --- requests -> executor requests ---------------------------------------------------------------------
    def make_jobs(self, request, group):
        from specbuild.reference.decoder.executor import Request

        x = Inputs(request)
        for name, feature in UNSUPPORTED_INPUTS.items():
            if x.given(name):
                raise BadRequest(
                    f"{name}: {feature} is not supported by the reference runtime — leave "
                    f"{name} out, or serve with runtime: tensorrt-llm"
                )
        rows = x.rows()
        if rows > 1 and not self.decoupled:
            raise BadRequest(
                "Batch size > 1 requires the tensorrt_llm backend to be using decoupled transaction policy"
            )
        ids = x.array("input_ids").reshape(rows, -1)
        jobs = []
        for row in range(rows):
            streaming = bool(x.scalar("streaming", row, False, bool))
            if streaming and not self.decoupled:
                raise BadRequest("Streaming is only supported if model is deployed using decoupled mode.")
            for name, default in (("beam_width", 1), ("num_return_sequences", 1)):
                value = x.scalar(name, row, default)
                if value not in (default, 0):
                    raise BadRequest(f"{name}={value}: the reference runtime decodes one sequence with beam width 1")
            for name in ("return_context_logits", "return_generation_logits"):
                if x.scalar(name, row, False, bool):
                    raise BadRequest(
                        f"{name} is not supported by the reference runtime (it returns no logits) "
                        f"— leave {name} out, or serve with runtime: tensorrt-llm"
                    )
            if x.given("embedding_bias") and np.any(x.array("embedding_bias").reshape(rows, -1)[row] != 0):
                raise BadRequest("embedding_bias is not supported by the reference runtime")
            length = x.scalar("input_lengths", row, None)
            if length is None:
                raise BadRequest("input_lengths is missing")
            if not 0 < length <= ids.shape[1]:
                raise BadRequest(f"input_lengths={length} does not fit input_ids of length {ids.shape[1]}")
            output_len = x.scalar("request_output_len", row, None)
            problem = max_tokens_problem(output_len, "request_output_len")
            if problem:
                raise BadRequest(problem)
            sampling = self.sampling(x, row)
            end_id = x.scalar("end_id", row, None)
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
            bad_words = word_list(bad.reshape((rows,) + bad.shape[-2:])[row]) if bad is not None and bad.size else []
            min_tokens = x.scalar(self.min_tokens_name, row, 0)
            if min_tokens < 0:
                raise BadRequest(
                    f"{self.min_tokens_name}={min_tokens} is invalid: it must be >= 0 (TensorRT-LLM: "
                    "Assertion failed: minTokens.value() >= 0)"
                )
            flags = {
                name: bool(x.scalar(name, row, False, bool))
                for name in (
                    "return_perf_metrics",
                    "return_num_input_tokens",
                    "return_num_output_tokens",
                    "return_log_probs",
                )
            }
            req = Request(
                input_ids=input_ids,
                max_new_tokens=int(output_len),
                sampling=sampling,
                end_id=end_id,
                pad_id=x.scalar("pad_id", row, None),
                stop_words=word_list(stop.reshape((rows,) + stop.shape[-2:])[row])
                if stop is not None and stop.size
                else [],
                bad_words=bad_words,
                draft_tokens=drafts,
                draft_logits=draft_logits,
                min_tokens=int(min_tokens),
                return_log_probs=flags["return_log_probs"],
            )
            jobs.append((RowJob(request, row, rows, group, streaming, exclude, input_ids, flags), req))
        return jobs

    def sampling(self, x, row):
        """TensorRT-LLM's sampling semantics: greedy unless top_k > 1 or top_p > 0 asks for sampling (top-k 1, as
        the top-k kernel does for top_k = top_p = 0); temperature then scales the logits (default 1.0), before the
        penalties (penaltyKernels.cu; a greedy request keeps its temperature for them). temperature 0 or top_k 1 is
        greedy. Values are checked first, as TensorRT-LLM's SamplingConfig does (a bad temperature is refused even
        where it would not be used)."""
        from specbuild.reference.decoder.executor import SamplingConfig

        top_k = x.scalar("runtime_top_k", row, None)
        top_p = x.scalar("runtime_top_p", row, None, float)
        temperature = x.scalar("temperature", row, None, float)
        penalties = {
            name: x.scalar(name, row, None, float)
            for name in ("repetition_penalty", "presence_penalty", "frequency_penalty")
        }
        problems = sampling_problems(temperature, top_k, top_p, ("temperature", "runtime_top_k", "runtime_top_p"))
        problems += penalty_problems(*penalties.values())
        if problems:
            raise BadRequest("; ".join(problems))
        top_k, top_p = top_k or 0, top_p or 0.0
        seed = x.scalar(self.seed_name, row, None)
        given = {name: value for name, value in penalties.items() if value is not None}
        temperature = 1.0 if temperature is None else temperature
        samples = top_k > 1 or top_p > 0.0
        if not samples or top_k == 1 or temperature == 0.0:
            return SamplingConfig(temperature=temperature, top_k=1, top_p=1.0, seed=seed, **given)
        return SamplingConfig(
            temperature=temperature, top_k=max(top_k, 0), top_p=top_p if 0.0 < top_p <= 1.0 else 1.0, seed=seed, **given
        )

    # --- responses ---------------------------------------------------------------------------------------------
    def response(self, job, tokens, final, log_probs=None):
        """One response: output_ids [1, 1, n], sequence_length [1, 1], and the asked-for outputs. log_probs: the
        TokenLogProbs of the generated tokens this response reports (all of them unless streaming)."""
        out = [
            pb_utils.Tensor("output_ids", np.array(tokens, dtype=np.int32).reshape(1, 1, -1)),
            pb_utils.Tensor("sequence_length", np.array([[len(tokens)]], dtype=np.int32)),
        ]
        if job.rows > 1:
            out.append(pb_utils.Tensor("batch_index", np.array([[job.row]], dtype=np.int32)))
        if job.flags["return_log_probs"]:
            reported = [
                lp.reported(self.normalize_log_probs) for lp in (job.log_probs if log_probs is None else log_probs)
            ]
            out.append(pb_utils.Tensor("cum_log_probs", np.array([[job.cum_log_prob]], dtype=np.float32)))
            out.append(pb_utils.Tensor("output_log_probs", np.array(reported, dtype=np.float32).reshape(1, 1, -1)))
        if job.flags["return_perf_metrics"]:
            stats = job.stats
            # KV blocks of one token (the reference cache is not paged), as the nv_trt_llm_kv_cache gauges count
            held = len(job.input_ids) + len(job.tokens)
            reused = stats.reused_prompt_tokens if stats else 0
            ints = {
                "kv_cache_alloc_new_blocks": held - reused,
                "kv_cache_reused_blocks": reused,
                "kv_cache_alloc_total_blocks": held,
                "total_accepted_draft_tokens": stats.total_accepted_draft_tokens if stats else 0,
                "total_draft_tokens": stats.total_draft_tokens if stats else 0,
            }
            for name, value in ints.items():
                out.append(pb_utils.Tensor(name, np.array([[value]], dtype=np.int32)))
            times = {
                "arrival_time_ns": job.arrival_ns,
                "first_scheduled_time_ns": job.first_scheduled_ns,
                "first_token_time_ns": job.first_token_ns,
                "last_token_time_ns": job.last_token_ns,
            }
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

    def on_event(self, job, event, step_start, step_end, tally=None):
        """Record one executor event; returns the tokens to stream now (None: nothing to send). `tally` counts
        the step's context (first event of a request) and generation requests for the metrics."""
        if tally is not None and event.finish_reason != "cancelled":
            if job.first_scheduled_ns is None:
                tally["context"] += 1
                tally["context_tokens"] += len(job.input_ids)
            else:
                tally["generation"] += 1
        if job.first_scheduled_ns is None:
            job.first_scheduled_ns = step_start
        job.stats = event.stats
        job.iterations += 1
        job.log_probs.extend(event.log_probs)
        job.cum_log_prob = event.cum_log_prob
        if event.finished and self.spec_metrics is not None and event.stats is not None:
            self.spec_metrics.observe_request(event.stats)
        if event.new_tokens:
            job.tokens.extend(event.new_tokens)
            job.first_token_ns = job.first_token_ns or step_end
            job.last_token_ns = step_end
        return event.new_tokens

    # --- the worker thread ------------------------------------------------------------------------------------
    def loop(self):
        """The executor thread: steps while there is work, records each step's events and builds its responses;
        the delivery thread sends them (and updates the metrics) while the next step runs. Steps with nothing to
        send yet (a row that streams every N-th step, or does not stream) wait in `held` and go over with the next
        one that has."""
        from specbuild.serve import decode_cpus

        decode_cpus.claim(self.name)  # the CPUs the launcher kept for this thread (SPECBUILD_EXECUTOR_CPUS)
        held = []
        while True:
            with self.lock:
                while self.running and not self.executor.has_work():
                    self.lock.wait(timeout=0.5)
                if not self.running:
                    return
                # is_cancelled() asks the server (a round trip): every cancellation_check_period_ms, as the C++
                # backend polls, not every step. A finished job left self.jobs (prepare_step, on this thread)
                # before its FINAL response was handed over, so no job polled here has had its factory freed
                now = time.monotonic()
                if now >= self.next_cancel_check:
                    self.next_cancel_check = now + self.cancel_period_s
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
                traceback.print_exc()
                held = self.hand_over(held)
                self.outbox.put(("fail", f"{type(e).__name__}: {e}"))
                continue
            end = time.time_ns()
            with self.lock:  # the jobs these events belong to
                found = [(self.jobs.get(event.request_id), event) for event in events]
                idle = not self.executor.has_work()
            sends, tally = self.prepare_step(found, start, end)
            held.append((sends, tally, idle))
            # Wake the delivery thread only for a step with something to send (or the metrics' period, or idle),
            # and leave it only the sending: its Python work takes the GIL that this thread's torch calls give up
            # and take back on every operation (bench/README.md, "The core's two threads")
            now = time.monotonic()
            metrics_due = self.batcher_metrics is not None and now >= self.next_handover
            if sends or idle or metrics_due:
                held = self.hand_over(held)
                self.next_handover = now + self.stats_period_s

    def hand_over(self, held):
        """Give the delivery thread the steps held so far (in the order they ran); returns the new, empty hold."""
        if held:
            self.outbox.put(("steps", held))
        return []

    def deliver_loop(self):
        """The delivery thread: sends each step's responses, in the order the steps ran (one response per step per
        streaming request, as the C++ backend sends them: clients count iterations from them), then updates its
        metrics. A send waits for the server to take the response, so it runs beside the executor thread."""
        while True:
            item = self.outbox.get()
            if item is None:
                return
            if item[0] == "fail":
                self.fail_all(item[1])
            else:
                for step in item[1]:
                    self.deliver_step(*step)

    def prepare_step(self, found, start, end):
        """On the executor thread: record one step's events and build its responses. Returns (sends, tally):
        [(sender, response or None, flags)] in sending order, and the step's counts for the metrics."""
        tally = new_tally()
        outgoing = []  # [job, new tokens, event, last row of its request]
        for job, event in found:
            if job is None:
                continue
            new = self.on_event(job, event, start, end, tally)
            last = False
            if event.finished:
                with self.lock:  # out of self.jobs before FINAL frees the request (the loop polls is_cancelled)
                    self.jobs.pop(event.request_id, None)
                    job.group["left"] -= 1
                    last = job.group["left"] == 0
            outgoing.append((job, new, event, last))
        # a request's FINAL response must be its last: rows that end their request go out after the others
        sends = []
        for job, new, event, last in sorted(outgoing, key=lambda e: e[3]):
            try:
                sends += self.outgoing(job, new, event, last)
            except Exception as e:  # noqa: BLE001 - a response that cannot be built fails its request, not the model
                traceback.print_exc()
                error = pb_utils.TritonError(f"{self.name}: could not build the response: {type(e).__name__}: {e}")
                sends.append(
                    (
                        job.group["sender"],
                        pb_utils.InferenceResponse(error=error),
                        pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL if last else 0,
                    )
                )
        return sends, tally

    def deliver_step(self, sends, tally, idle):
        """Send one step's responses (prepare_step's), then count the step in the metrics."""
        for sender, response, flags in sends:
            try:
                if response is None:
                    sender.send(flags=flags)
                else:
                    sender.send(response, flags=flags)
            except Exception:  # noqa: BLE001 - e.g. the client went away
                traceback.print_exc()
        with self.lock:
            pending = list(self.jobs.values()) if self.batcher_metrics is not None else []
        # metric updates go to the server (not under the lock); at most every stats_check_period_ms, and when
        # the executor goes idle, so the gauges settle on the last iteration
        self.report_iteration(tally, pending, force=idle)

    def report_iteration(self, tally, jobs, force=True):
        """The nv_trt_llm_* gauges after one step; `jobs`: the requests not finished yet. Published at most
        every stats_check_period_ms (the C++ backend's period for its iteration statistics) unless `force`;
        every step counts in iteration_counter."""
        if self.batcher_metrics is None:
            return
        now = time.monotonic()
        publish = force or now >= self.next_report
        if publish:
            self.next_report = now + self.stats_period_s
        # the gauges' inputs only when they are published (a step in between only counts): per-step Python on
        # the delivery thread holds the GIL the executor thread needs for its next step
        active = [j for j in jobs if j.first_scheduled_ns is not None] if publish else []
        try:
            self.batcher_metrics.iteration(
                waiting=len(jobs) - len(active),
                context=tally["context"],
                generation=tally["generation"],
                context_tokens=tally["context_tokens"],
                active=len(active),
                kv_tokens=[len(j.input_ids) + len(j.tokens) for j in active],
                publish=publish,
            )
        except Exception:  # noqa: BLE001 - metrics never fail a request
            traceback.print_exc()

    def is_ready(self):
        """Readiness beyond the stub's own health (Triton releases whose python backend asks the model, python
        backend PR #430): ready while its executor and delivery threads run."""
        return bool(self.running and self.worker.is_alive() and self.delivery.is_alive())

    def outgoing(self, job, new, event, last):
        """The response of one row to one executor event, as [(sender, response or None, flags)] (empty: nothing
        to send): its new tokens (and their log probs) when it streams, its whole output when it finished; FINAL
        when it is the last row of its request to finish."""
        flags = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL if last else 0
        sender = job.group["sender"]
        if job.streaming:
            new, log_probs = self.due(job, new, event)
            if new:
                return [(sender, self.response(job, new, event.finished, log_probs), flags)]
            return [(sender, None, flags)] if last else []
        if event.finished:
            return [(sender, self.response(job, self.full_output(job), True), flags)]
        return []

    def due(self, job, new, event):
        """(tokens, log probs) to stream now — those of the steps since the last response, on the row's first step,
        every stream_interval-th and its last (every step at the default 1) — else ([], []) and they wait."""
        from specbuild.reference.decoder.request import streams_now

        job.unsent.extend(new)
        job.unsent_log_probs.extend(event.log_probs)
        if not streams_now(job.iterations, self.stream_interval, event.finished):
            return [], []
        out, job.unsent = job.unsent, []
        log_probs, job.unsent_log_probs = job.unsent_log_probs, []
        return out, log_probs

    def fail_all(self, message):
        with self.lock:
            jobs, self.jobs = list(self.jobs.items()), {}
        groups = {}
        for rid, job in jobs:
            self.executor.cancel(rid)
            groups[id(job.group)] = job.group
        for group in groups.values():
            try:
                group["sender"].send(
                    pb_utils.InferenceResponse(error=pb_utils.TritonError(message)),
                    flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
                )
            except Exception:  # noqa: BLE001
                pass

    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            try:
                if self.is_stop(request):
                    self.stop_request(request.request_id())
                    if self.decoupled:
                        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                    else:  # exactly one response
                        sender.send(
                            pb_utils.InferenceResponse(output_tensors=[]),
                            flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
                        )
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
            except Exception as e:  # noqa: BLE001 - BadRequest, UserError from the executor's checks, ...
                sender.send(
                    pb_utils.InferenceResponse(error=pb_utils.TritonError(self.message(e))),
                    flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
                )
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
        return text if isinstance(e, BadRequest) or type(e).__name__ == "UserError" else f"{type(e).__name__}: {text}"

    def finalize(self):
        with self.lock:
            self.running = False
            self.lock.notify_all()
        if self.worker is not None:
            self.worker.join(timeout=10)
            self.outbox.put(None)
            self.delivery.join(timeout=10)
