"""Toy `tensorrt_llm` core model (python backend, decoupled): the C++ model's main tensors over toy_lm.

One worker thread steps every active request together, like an inflight batcher: a step costs
step_ms + token_ms * (tokens the step processes), so speculation (1 + draft_len tokens per request per step)
wins at low concurrency and loses at high concurrency, as on real hardware.

Parameters: toy_mode (baseline|speculative), toy_broken (comma-separated: tokens, sampling), draft_len, max_input_len,
max_seq_len, step_ms, token_ms, toy_weak_on (a text: the drafts of a prompt holding it are all rejected),
draft_len_schedule (specbuild's: the draft length per number of requests a step serves, draft_len_schedule.py
beside this file), toy_stale_on (a text: once a step with the schedule's drafting off served a prompt holding it,
every later prompt holding it drafts nothing: drafting that does not come back after a spike).
"""

import json
import math
import queue
import threading
import time

import draft_len_schedule
import numpy as np
import toy_lm
import triton_python_backend_utils as pb_utils


def _param(cfg, key, default):
    v = cfg.get("parameters", {}).get(key, {}).get("string_value")
    return default if v in (None, "") else v


def _opt(request, name, default=None):
    t = pb_utils.get_input_tensor_by_name(request, name)
    if t is None:
        return default
    return t.as_numpy().reshape(-1)


class Job:
    def __init__(self, request, sender, mode):
        self.sender = sender
        ids = _opt(request, "input_ids", np.zeros(0, dtype=np.int32))
        n_in = _opt(request, "input_lengths")
        self.prompt = [int(x) for x in ids[: int(n_in[0]) if n_in is not None else len(ids)]]
        out = _opt(request, "request_output_len")
        self.max_new = int(out[0]) if out is not None else 0
        self.streaming = bool(_opt(request, "streaming", [False])[0])
        temp = _opt(request, "temperature")
        top_k = _opt(request, "runtime_top_k")
        top_p = _opt(request, "runtime_top_p")
        self.raw_sampling = (
            None if temp is None else float(temp[0]),
            None if top_k is None else int(top_k[0]),
            None if top_p is None else float(top_p[0]),
        )
        self.temperature = float(temp[0]) if temp is not None else 1.0
        self.greedy = (top_k is not None and int(top_k[0]) == 1) or temp is None or self.temperature == 0.0
        seed = _opt(request, "seed")
        self.seed = int(seed[0]) if seed is not None else 0
        self.exclude = bool(_opt(request, "exclude_input_in_output", [True])[0])
        self.perf = bool(_opt(request, "return_perf_metrics", [False])[0])
        self.stop_words = []
        sw = pb_utils.get_input_tensor_by_name(request, "stop_words_list")
        if sw is not None:
            arr = sw.as_numpy().reshape(2, -1)
            start = 0
            for end in arr[1]:
                if end < 0:
                    break
                self.stop_words.append([int(x) for x in arr[0][start : int(end)]])
                start = int(end)
        salt = 7919 if mode == "speculative" else 0
        self.rng = np.random.default_rng(self.seed + salt)
        self.generated = []
        self.accepted = 0
        self.drafted = 0
        self.done = False
        self.pending = []  # tokens not yet sent (non-streaming)


class TritonPythonModel:
    def initialize(self, args):
        cfg = json.loads(args["model_config"])
        self.mode = _param(cfg, "toy_mode", "baseline")
        self.broken = set(_param(cfg, "toy_broken", "").split(","))
        self.draft_len = int(_param(cfg, "draft_len", "4"))
        # a head that is weak on one kind of traffic: every draft of a prompt holding this text is rejected
        self.weak_on = _param(cfg, "toy_weak_on", "")
        schedule = _param(cfg, draft_len_schedule.PARAMETER, "")
        self.schedule = draft_len_schedule.parse(schedule) if schedule else None
        self.stale_on = _param(cfg, "toy_stale_on", "")
        self.stale = False  # the schedule turned drafting off while serving a prompt holding stale_on
        self.max_input_len = int(_param(cfg, "max_input_len", "256"))
        self.max_seq_len = int(_param(cfg, "max_seq_len", "512"))
        self.step_s = float(_param(cfg, "step_ms", "4")) / 1000.0
        self.token_s = float(_param(cfg, "token_ms", "0.5")) / 1000.0
        self.jobs = queue.Queue()
        self.stopping = False
        self.worker = threading.Thread(target=self._loop, daemon=True)
        self.worker.start()

    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            try:
                job = Job(request, sender, self.mode)
                problem = self._problem(job)
            except Exception as e:  # noqa: BLE001
                problem = f"bad request: {type(e).__name__}: {e}"
            if problem:
                sender.send(
                    pb_utils.InferenceResponse(error=pb_utils.TritonError(problem)),
                    flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
                )
                continue
            self.jobs.put(job)
        return None

    def _problem(self, job):
        temperature, top_k, top_p = job.raw_sampling  # TensorRT-LLM's SamplingConfig checks (+ a finite temperature)
        if temperature is not None and not (math.isfinite(temperature) and temperature >= 0):
            return f"temperature={temperature} must be a finite number >= 0"
        if top_k is not None and top_k < 0:
            return f"top_k={top_k} must be >= 0"
        if top_p is not None and top_p != 0 and not 0 < top_p <= 1:
            return f"top_p={top_p} must be in (0, 1]"
        if not job.prompt:
            return "the prompt is empty"
        if len(job.prompt) > self.max_input_len:
            return f"prompt of {len(job.prompt)} tokens exceeds max_input_len {self.max_input_len}"
        if job.max_new <= 0:
            return f"max_tokens must be positive, got {job.max_new}"
        if len(job.prompt) + job.max_new > self.max_seq_len:
            return f"prompt + max_tokens = {len(job.prompt) + job.max_new} exceeds max_seq_len {self.max_seq_len}"
        return None

    # -- the batched decode loop ---------------------------------------------------------------------------
    def _loop(self):
        active = []
        while not self.stopping:
            try:
                active.append(self.jobs.get(timeout=0.05) if not active else self.jobs.get_nowait())
                continue  # take every waiting job before stepping
            except queue.Empty:
                if not active:
                    continue
            active = [j for j in active if not self._cancelled(j)]
            if not active:
                continue
            spec = self.mode == "speculative"
            step_len = (
                self.draft_len if self.schedule is None else draft_len_schedule.draft_length(self.schedule, len(active))
            )
            if step_len == 0 and self.stale_on and any(self._holds(j, self.stale_on) for j in active):
                self.stale = True
            lengths = {id(j): self._job_draft_len(j, step_len) for j in active}
            tokens = sum(1 + (lengths[id(j)] if spec and j.greedy and j.generated else 0) for j in active)
            time.sleep(self.step_s + self.token_s * tokens)
            for job in active:
                try:
                    self._advance(job, lengths[id(job)])
                except Exception as e:  # noqa: BLE001
                    job.done = True
                    job.sender.send(
                        pb_utils.InferenceResponse(error=pb_utils.TritonError(str(e))),
                        flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
                    )
            active = [j for j in active if not j.done]

    @staticmethod
    def _holds(job, text):
        return text in toy_lm.decode(job.prompt)

    def _job_draft_len(self, job, step_len):
        """The draft length of one job's step: the schedule's, or none at all for a stale prompt."""
        if self.stale and self._holds(job, self.stale_on):
            return 0
        return step_len

    def _cancelled(self, job):
        if job.sender.is_cancelled():
            job.done = True
            return True
        return False

    def _next_tokens(self, job, draft_len):
        ctx = job.prompt + job.generated
        if not job.greedy and "sampling" in self.broken:  # the bug: the speculative path ignores temperature
            return [toy_lm.greedy_next(ctx)]
        if not job.greedy:
            if self.mode == "speculative":
                return [toy_lm.speculative_sample(ctx, job.temperature, job.rng)]
            return [toy_lm.sample_next(ctx, job.temperature, job.rng)]
        if (
            self.mode == "speculative"
            and job.generated
            and draft_len
            and self.weak_on
            and self.weak_on in toy_lm.decode(job.prompt)
        ):  # the drafts proposed, none accepted
            job.drafted += draft_len
            return [toy_lm.greedy_next(ctx)]
        if self.mode == "speculative" and job.generated and draft_len:  # the context step yields one token
            emitted, accepted = toy_lm.speculate(ctx, draft_len)
            job.drafted += draft_len
            job.accepted += accepted
            return emitted
        return [toy_lm.greedy_next(ctx)]

    def _advance(self, job, draft_len):
        new = self._next_tokens(job, draft_len)
        if "tokens" in self.broken:
            pos = len(job.generated)
            new = [(t + 1 if pos + i == 5 else t) for i, t in enumerate(new)]
        room = job.max_new - len(job.generated)
        new = new[:room]
        for i in range(len(new)):  # stop words: end right after the first one completed
            seq = job.generated + new[: i + 1]
            if any(len(w) and seq[-len(w) :] == w for w in job.stop_words):
                new = new[: i + 1]
                job.done = True
                break
        if len(job.generated) + len(new) >= job.max_new:
            job.done = True
        job.generated += new
        if job.streaming:
            job.sender.send(
                self._response(job, new), flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL if job.done else 0
            )
        elif job.done:
            ids = job.generated if job.exclude else job.prompt + job.generated
            job.sender.send(self._response(job, ids), flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def _response(self, job, ids):
        arr = np.array(ids, dtype=np.int32).reshape(1, 1, -1)
        outs = [
            pb_utils.Tensor("output_ids", arr),
            pb_utils.Tensor("sequence_length", np.array([[len(ids)]], dtype=np.int32)),
        ]
        if job.perf:
            rate = job.accepted / job.drafted if job.drafted else 0.0
            outs += [
                pb_utils.Tensor("acceptance_rate", np.array([[rate]], dtype=np.float32)),
                pb_utils.Tensor("total_accepted_draft_tokens", np.array([[job.accepted]], dtype=np.int32)),
                pb_utils.Tensor("total_draft_tokens", np.array([[job.drafted]], dtype=np.int32)),
            ]
        return pb_utils.InferenceResponse(output_tensors=outs)

    def finalize(self):
        self.stopping = True
        self.worker.join(timeout=2)
