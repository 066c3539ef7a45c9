"""Triton `tensorrt_llm_bls` (specbuild): text in, text out, with the speculative loop of draft-target and prompt
lookup.

Self-contained (numpy, triton_python_backend_utils and the helper files beside it): it runs in NVIDIA's
tritonserver containers, where specbuild is not installed. Tensor contract: TensorRT-LLM
triton_backend/all_models/inflight_batcher_llm/tensorrt_llm_bls/config.pbtxt@bff88ea, and upstream's
tensorrt_llm_bls (lib/decode.py@4db6828, lib/triton_decoder.py@07f3e44).

Per request row (a request batch > 1 is served row by row, concurrently):
0. The row is checked where it enters: text_input and max_tokens > 0 (upstream's wording), sampling values as
   TensorRT-LLM's SamplingConfig checks them (request_checks.py), multimodal inputs refused in one sentence.
1. `preprocessing` turns the text (and decoder text), bad/stop words, end/pad overrides and the prompt-table
   extra id into token ids and word lists.
2. Plain generation: one `tensorrt_llm` call (streamed when it is decoupled and the request streams); the
   engine does any speculation itself (Medusa, EAGLE, lookahead). Upstream's optional inputs (LoRA, guided
   decoding, prompt tables, decoder input ids, min_tokens/min_length, penalties, seed, ...) are forwarded.
   Speculative rounds (parameter speculative_method draft_target | prompt_lookup, num_draft_tokens > 0): draft
   exactly K tokens (a `tensorrt_llm_draft` call with min_tokens = request_output_len = K, as upstream's BLS;
   or the n-gram match of the last tokens in the prompt and the text so far), then one `tensorrt_llm` call with
   them as `draft_input_ids` and request_output_len K + 1, which returns the accepted drafts plus the target's
   own next token, and after a partial acceptance the tokens the target decodes on its own up to K + 1. The
   round's seed is derived from the request's seed, distinct for the draft and the target and for every round. A client's minimum length is carried into each round as what is still missing; the
   penalties go to both calls (the text so far is each round's prompt, which TensorRT-LLM's penalties count as
   they count generated tokens), and with return_log_probs the target's per-round log probabilities are
   concatenated (cum_log_probs summed).
   With a `draft_len_schedule` (adaptive speculation) each round drafts at most the length the schedule gives for
   the rows this BLS has in flight; at 0 the round is plain: the target alone generates the tokens that
   PLAIN_ROUND_ROUNDS fully accepted rounds would (4 x (num_draft_tokens + 1)), and the next round looks at the load
   again. Each round is a new request to the core, so short plain rounds would cost a request per few tokens just
   where the load is highest (bench/README.md, "Draft-target served").
3. `postprocessing` decodes. Streaming (the BLS is decoupled and the request sets `stream`) sends each round's or
   each core response's new text as it comes; the chunks concatenate exactly to the non-streamed text.

Outputs: text_output [1] per row (rank 1 per request, [batch] for a batch: text_output[0].decode() as upstream);
output_ids [1, 1, n] (the token ids behind text_output: the prompt first unless exclude_input_in_output; in a
stream, each chunk's tokens); with return_perf_metrics acceptance_rate, total_accepted_draft_tokens,
total_draft_tokens (counted here for the speculative rounds, passed through from the engine otherwise) and the
timing outputs; with return_num_*_tokens the token counts.
Metrics (serving_metrics.py): specbuild's speculative-decoding counters of the rounds this BLS runs, labelled
model="tensorrt_llm_bls": a round is the target forward that verifies its drafts plus one step per token the
target decodes after it, so that steps = output tokens - accepted drafts, as the client counts them.
"""

import json
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import triton_python_backend_utils as pb_utils
from bls_drafting import (TextStream, accepted_prefix, ends_with_stop_word, plain_steps_after_verification,
                          round_seed)
from draft_len_schedule import PARAMETER as SCHEDULE_PARAMETER
from draft_len_schedule import draft_length, parse as parse_schedule
from model_parameters import ParameterError, bool_parameter, int_parameter, parameter
from prompt_lookup_drafts import DEFAULT_MAX_MATCHING_NGRAM_SIZE, propose as prompt_lookup_drafts
from request_checks import max_tokens_problem, min_tokens_value, penalty_problems, sampling_problems
from serving_metrics import SpeculationMetrics, metrics_or_none

# client input -> tensorrt_llm input, sent to every core call (the draft's and the target's), as upstream's
# _get_llm_tensors_from_request; the minimum length goes separately (min_tokens / min_length, per round)
CORE_INPUTS = {
    "top_k": "runtime_top_k", "top_p": "runtime_top_p", "temperature": "temperature",
    "length_penalty": "len_penalty", "repetition_penalty": "repetition_penalty",
    "presence_penalty": "presence_penalty", "frequency_penalty": "frequency_penalty",
    "beam_width": "beam_width", "num_return_sequences": "num_return_sequences",
}
# forwarded with their own shape (not one value per row)
CORE_TENSORS = ("prompt_embedding_table", "prompt_vocab_size", "lora_task_id", "lora_weights", "lora_config",
                "guided_decoding_guide_type", "guided_decoding_guide")
MULTIMODAL_INPUTS = ("image_input", "image_bytes_input", "image_url_input", "video_bytes_input")
OUTPUT_FLAGS = ("return_log_probs", "return_context_logits", "return_generation_logits", "return_perf_metrics",
                "return_num_input_tokens", "return_num_output_tokens")
PRE_INPUTS = {"bad_words": "BAD_WORDS_DICT", "stop_words": "STOP_WORDS_DICT", "end_id": "END_ID", "pad_id": "PAD_ID",
              "embedding_bias_words": "EMBEDDING_BIAS_WORDS", "embedding_bias_weights": "EMBEDDING_BIAS_WEIGHTS",
              "decoder_text_input": "DECODER_QUERY", "prompt_table_extra_id": "PROMPT_TABLE_EXTRA_ID"}
PERF_INT32 = ("kv_cache_alloc_new_blocks", "kv_cache_reused_blocks", "kv_cache_alloc_total_blocks",
              "total_accepted_draft_tokens", "total_draft_tokens")
PERF_INT64 = ("arrival_time_ns", "first_scheduled_time_ns", "first_token_time_ns", "last_token_time_ns")
# a plain round (draft_len_schedule at 0) stands for this many fully accepted rounds: one core request per
# 4 x (num_draft_tokens + 1) tokens, not per num_draft_tokens + 1
PLAIN_ROUND_ROUNDS = 4
LOGIT_OUTPUTS = {"return_log_probs": ("cum_log_probs", "output_log_probs"),
                 "return_context_logits": ("context_logits",), "return_generation_logits": ("generation_logits",)}


class RequestError(Exception):
    """A bad request or a failed model call: answered with an error response, the model stays healthy."""


class Cancelled(Exception):
    pass


def tensor_array(name, value, dtype):
    return pb_utils.Tensor(name, np.array(value, dtype=dtype).reshape(1, 1) if np.ndim(value) == 0
                           else np.asarray(value, dtype=dtype))


def output(response, name):
    tensor = pb_utils.get_output_tensor_by_name(response, name)
    return None if tensor is None else tensor.as_numpy()


def requested_only(request, tensors):
    """The tensors the request asked for. A decoupled response carrying others has them dropped inside
    ResponseSender.send with the GIL released, which frees their numpy arrays without it: heap corruption and an
    intermittent stub crash under load on Triton <= 24.11 (python_backend PR #390, "Fix requested output deleting
    extra outputs", pb_tensor.cc ~PbTensor holds the GIL since). Dropping them here, with the GIL, avoids that path."""
    wanted = set(request.requested_output_names())
    return [t for t in tensors if t.name() in wanted]


def pad_stack(arrays, fill):
    """Stack [1, ...] arrays of different trailing shapes into [n, ...], padding with `fill`."""
    shape = [max(a.shape[d] for a in arrays) for d in range(1, arrays[0].ndim)]
    out = np.full([len(arrays)] + shape, fill, dtype=arrays[0].dtype)
    for i, a in enumerate(arrays):
        out[(i,) + tuple(slice(0, s) for s in a.shape[1:])] = a[0]
    return out


class Row:
    """One row of a request: what the client asked for, validated."""

    def __init__(self, model, request, row, rows):
        self.request = request
        self.row = row
        self.rows = rows
        self.arrival_ns = time.time_ns()

        def get(name):
            tensor = pb_utils.get_input_tensor_by_name(request, name)
            if tensor is None:
                return None
            array = tensor.as_numpy()
            return array[row:row + 1] if array.ndim > 0 and array.shape[0] == rows else array

        def scalar(name, default=None, kind=int):
            array = get(name)
            return default if array is None or array.size == 0 else kind(array.reshape(-1)[0])

        for name in MULTIMODAL_INPUTS:
            array = get(name)
            if array is not None and array.size:
                raise RequestError(f"{name}: multimodal inputs are not supported by this repository (specbuild "
                                   "serves text-only models) — send text_input only")
        self.text = get("text_input")
        if self.text is None or self.text.size == 0:
            raise RequestError("text_input is required")
        self.max_tokens = scalar("max_tokens")
        problem = max_tokens_problem(self.max_tokens)
        if problem:
            raise RequestError(problem)
        problems = sampling_problems(scalar("temperature", None, float), scalar("top_k", None),
                                     scalar("top_p", None, float))
        problems += penalty_problems(scalar("repetition_penalty", None, float), scalar("presence_penalty", None, float),
                                     scalar("frequency_penalty", None, float))
        if problems:
            raise RequestError("; ".join(problems))
        self.min_tokens, problem = min_tokens_value(scalar("min_tokens"), scalar("min_length"))
        if problem:
            raise RequestError(problem)
        self.stream = bool(scalar("stream", False, bool))
        if self.stream and not model.decoupled:
            raise RequestError("stream needs the decoupled tensorrt_llm_bls (recipe triton.streaming: true); use "
                               "/generate or send stream: false")
        self.exclude = bool(scalar("exclude_input_in_output", model.default_exclude, bool))
        self.flags = {name: bool(scalar(name, False, bool)) for name in OUTPUT_FLAGS}
        self.seed = scalar(model.seed_name, None)
        self.use_draft_logits = bool(scalar("use_draft_logits", model.default_use_draft_logits, bool))
        self.num_draft_tokens = scalar("num_draft_tokens", model.default_num_draft_tokens)
        if self.num_draft_tokens < 0:
            raise RequestError(f"num_draft_tokens must be >= 0, got {self.num_draft_tokens}")
        if self.num_draft_tokens > 0 and model.speculative_method is None:
            raise RequestError("num_draft_tokens applies to draft-target and prompt-lookup deployments; this one "
                               "drafts inside the engine (or does not speculate) — leave it out")
        if model.max_draft_len is not None and self.num_draft_tokens > model.max_draft_len:
            raise RequestError(f"num_draft_tokens={self.num_draft_tokens} exceeds the target engine's max_draft_len="
                               f"{model.max_draft_len}")
        self.core = {}
        for client, core in CORE_INPUTS.items():
            array = get(client)
            if array is not None and array.size and core in model.core_input_names:
                self.core[core] = array.reshape(1, -1)[:, :1]
        for name in OUTPUT_FLAGS:
            if self.flags[name] and name in model.core_input_names:
                self.core[name] = np.array([[True]])
        for name in CORE_TENSORS:
            array = get(name)
            if array is not None and array.size:
                self.core[name] = array if array.ndim > 1 else array.reshape(1, -1)
        self.pre = {}
        for client, pre in PRE_INPUTS.items():
            array = get(client)
            if array is not None and array.size:
                self.pre[pre] = array.reshape(1, -1)
        self.speculative = model.speculative_method is not None and self.num_draft_tokens > 0
        if self.speculative:
            for name in ("return_context_logits", "return_generation_logits"):
                if self.flags[name]:
                    raise RequestError(f"{name} is not supported with speculative drafting in the BLS")
            if scalar("beam_width", 1) > 1:
                raise RequestError("beam search is not supported with speculative drafting")
            for name in ("prompt_embedding_table", "prompt_table_extra_id"):
                if get(name) is not None and get(name).size:
                    raise RequestError(f"{name} is not supported with speculative drafting in the BLS (every round "
                                       "sends the text so far as a new prompt) — send num_draft_tokens: 0")


class Prepared:
    """preprocessing's output for one row."""

    def __init__(self, response):
        self.input_ids = [int(t) for t in output(response, "INPUT_ID")[0][: int(output(response, "REQUEST_INPUT_LEN")[0][0])]]
        self.end_id = int(output(response, "OUT_END_ID").reshape(-1)[0])
        self.pad_id = int(output(response, "OUT_PAD_ID").reshape(-1)[0])
        self.stop = output(response, "STOP_WORDS_IDS")
        self.bad = output(response, "BAD_WORDS_IDS")
        self.bias = output(response, "EMBEDDING_BIAS")
        self.stop_words = self.words(self.stop)
        self.decoder_input_ids = output(response, "DECODER_INPUT_ID")  # forwarded as upstream's BLS does
        self.prompt_table_extra_ids = output(response, "OUT_PROMPT_TABLE_EXTRA_IDS")

    @staticmethod
    def words(array):
        if array is None or array.size == 0:
            return []
        ids, offsets = array.reshape(2, -1)[0].tolist(), array.reshape(2, -1)[1].tolist()
        words, start = [], 0
        for end in offsets:
            if end < 0:
                break
            words.append(ids[start:end])
            start = end
        return words


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.version = str(args.get("model_version", "1"))
        self.running = True
        try:
            self.configure(config)
        except ParameterError as e:
            raise pb_utils.TritonModelException(f"tensorrt_llm_bls: {e}") from None
        self.pool = ThreadPoolExecutor(max_workers=64, thread_name_prefix="bls")

    def configure(self, config):
        self.decoupled = pb_utils.using_decoupled_model_transaction_policy(config)
        declared = {t["name"] for t in config.get("input", [])}
        # The release's spelling (the BLS declares both minimum-length names; the seed tells the release)
        legacy = "random_seed" in declared
        self.seed_name = "random_seed" if legacy else "seed"
        self.min_tokens_name = "min_length" if legacy else "min_tokens"
        self.core_input_names = (set(CORE_INPUTS.values())
                                 | set(OUTPUT_FLAGS) - ({"return_num_input_tokens", "return_num_output_tokens"}
                                                        if legacy else set()))
        self.spec_metrics = metrics_or_none(lambda: SpeculationMetrics("tensorrt_llm_bls", self.version),
                                            "tensorrt_llm_bls")
        self.target = parameter(config, "tensorrt_llm_model_name", "tensorrt_llm")
        self.draft = parameter(config, "tensorrt_llm_draft_model_name")
        self.target_decoupled = bool_parameter(config, "tensorrt_llm_decoupled", False)
        self.accumulate = bool_parameter(config, "accumulate_tokens", False)
        self.default_exclude = bool_parameter(config, "exclude_input_in_output", False)
        self.speculative_method = parameter(config, "speculative_method")
        if self.speculative_method not in (None, "draft_target", "prompt_lookup"):
            raise pb_utils.TritonModelException(f"tensorrt_llm_bls: speculative_method {self.speculative_method!r} "
                                                "is not draft_target or prompt_lookup")
        if self.speculative_method == "draft_target" and not self.draft:
            raise pb_utils.TritonModelException("tensorrt_llm_bls: speculative_method draft_target needs "
                                                "tensorrt_llm_draft_model_name")
        self.default_num_draft_tokens = int_parameter(config, "default_num_draft_tokens", 0, minimum=0)
        self.default_use_draft_logits = bool_parameter(config, "default_use_draft_logits", False)
        self.max_matching_ngram_size = int_parameter(config, "max_matching_ngram_size",
                                                     DEFAULT_MAX_MATCHING_NGRAM_SIZE, minimum=1)
        self.max_draft_len, self.max_input_len, self.max_seq_len = (
            int_parameter(config, key, minimum=1) for key in ("max_draft_len", "max_input_len", "max_seq_len"))
        # adaptive speculation: the drafts per round follow the rows this BLS has in flight (draft_len_schedule.py)
        text = parameter(config, SCHEDULE_PARAMETER)
        try:
            self.schedule = parse_schedule(text) if text is not None else None
        except ValueError as e:
            raise ParameterError(f"parameter {SCHEDULE_PARAMETER}={text!r}: {e}") from None
        self.in_flight = 0
        self.in_flight_lock = threading.Lock()

    # --- Triton entry point -----------------------------------------------------------------------------------
    def execute(self, requests):
        if self.decoupled:
            for request in requests:
                self.start_decoupled(request)
            return None
        work = []
        for request in requests:
            try:
                rows = self.parse(request)
                work.append([self.pool.submit(self.run_row, row, None) for row in rows])
            except Exception as e:  # noqa: BLE001
                work.append(e)
        responses = []
        for item in work:
            if isinstance(item, Exception):
                responses.append(self.error(item))
                continue
            try:
                responses.append(self.combine([f.result() for f in item]))
            except Exception as e:  # noqa: BLE001
                responses.append(self.error(e))
        return responses

    def start_decoupled(self, request):
        sender = request.get_response_sender()
        try:
            rows = self.parse(request)
        except Exception as e:  # noqa: BLE001
            sender.send(self.error(e), flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            return
        group = {"left": len(rows), "lock": threading.Lock(), "failed": False}

        def finish_row(response):
            # Send under the lock: the row that sends FINAL must be the last to send anything, or a row finishing
            # at the same moment would send after the final flag and its answer would be lost.
            with group["lock"]:
                group["left"] -= 1
                last = group["left"] == 0
                flags = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL if last else 0
                if response is not None:
                    sender.send(response, flags=flags)
                elif last:
                    sender.send(flags=flags)

        def send_chunk(tensors):
            with group["lock"]:  # one sender, several row threads
                sender.send(pb_utils.InferenceResponse(output_tensors=requested_only(request, tensors)))

        def serve(row):
            emit = send_chunk if row.stream else None
            try:
                result = self.run_row(row, emit, sender)
                finish_row(None if row.stream else
                           pb_utils.InferenceResponse(output_tensors=requested_only(request, result)))
            except Cancelled:
                finish_row(None)
            except Exception as e:  # noqa: BLE001
                if not isinstance(e, RequestError):  # a refused request is answered, not a fault to log
                    traceback.print_exc()
                finish_row(self.error(e))

        for row in rows:
            self.pool.submit(serve, row)

    def parse(self, request):
        text = pb_utils.get_input_tensor_by_name(request, "text_input")
        rows = 1 if text is None or text.as_numpy().ndim == 0 else text.as_numpy().shape[0]
        return [Row(self, request, r, rows) for r in range(rows)]

    def error(self, e):
        message = str(e) if isinstance(e, RequestError) else f"{type(e).__name__}: {e}"
        return pb_utils.InferenceResponse(error=pb_utils.TritonError(message))

    def combine(self, results):
        """Rows' output tensors -> one response with a batch dimension."""
        if len(results) == 1:
            return pb_utils.InferenceResponse(output_tensors=results[0])
        by_name = {}
        for tensors in results:
            for t in tensors:
                by_name.setdefault(t.name(), []).append(t.as_numpy())
        out = []
        for name, arrays in by_name.items():
            if len(arrays) != len(results):
                continue
            fill = b"" if arrays[0].dtype == object else (-1 if name == "output_ids" else 0)
            out.append(pb_utils.Tensor(name, pad_stack(arrays, fill)))
        return pb_utils.InferenceResponse(output_tensors=out)

    # --- one row ------------------------------------------------------------------------------------------------
    def run_row(self, row, emit, sender=None):
        """Generate for one row. Streams through `emit(tensors)` when given; returns the final output tensors
        (for a stream: the last chunk was already sent, returns None)."""
        prepared = self.preprocess(row)
        state = {"row": row, "sender": sender, "prepared": prepared, "generated": [], "first_scheduled": None,
                 "first_token": None, "last_token": None, "perf": {}, "passthrough": {},
                 "streaming": emit is not None, "log_probs": [], "cum_log_prob": 0.0}
        # A stream's chunks carry only generated tokens whatever exclude_input_in_output says, as the core's
        # streamed responses (and so the ensemble's stream) do
        visible_prefix = [] if row.exclude or emit is not None else list(prepared.input_ids)
        stream = TextStream(lambda tokens: self.decode(tokens)) if emit is not None else None
        sent = {"ids": 0}

        def on_tokens(final=False):
            """Send what is new (streaming)."""
            if emit is None:
                return
            tokens = visible_prefix + state["generated"]
            delta = stream.push(tokens, final=final)
            new_ids = tokens[sent["ids"]:]
            if not new_ids and not delta:
                return
            ids = tokens if self.accumulate else new_ids
            sent["ids"] = len(tokens)
            text = stream.sent if self.accumulate else delta
            emit(self.row_outputs(state, ids, text))

        if row.speculative:
            with self.in_flight_lock:
                self.in_flight += 1
            try:
                self.speculate(state, on_tokens)
            finally:
                with self.in_flight_lock:
                    self.in_flight -= 1
        else:
            self.generate(state, on_tokens)
        if emit is not None:
            on_tokens(final=True)
            return None
        tokens = visible_prefix + state["generated"]
        return self.row_outputs(state, tokens, self.decode(tokens))

    def row_outputs(self, state, tokens, text):
        row = state["row"]
        # text_output rank 1 ([1] per row, [batch] for a request batch), as upstream's BLS and postprocessing
        out = [pb_utils.Tensor("text_output", np.array([text.encode("utf-8")], dtype=object)),
               pb_utils.Tensor("output_ids", np.array(tokens, dtype=np.int32).reshape(1, 1, -1))]
        if row.rows > 1 and self.decoupled:
            out.append(pb_utils.Tensor("batch_index", np.array([[row.row]], dtype=np.int32)))
        for name, array in state["passthrough"].items():
            out.append(pb_utils.Tensor(name, array))
        if row.flags["return_perf_metrics"]:
            perf = dict(state["perf"])
            perf.setdefault("arrival_time_ns", row.arrival_ns)
            perf.setdefault("first_scheduled_time_ns", state["first_scheduled"] or 0)
            perf.setdefault("first_token_time_ns", state["first_token"] or 0)
            perf.setdefault("last_token_time_ns", state["last_token"] or 0)
            for name in PERF_INT32:
                out.append(pb_utils.Tensor(name, np.array([[perf.get(name, 0)]], dtype=np.int32)))
            for name in PERF_INT64:
                out.append(pb_utils.Tensor(name, np.array([[perf.get(name, 0)]], dtype=np.int64)))
            out.append(pb_utils.Tensor("acceptance_rate",
                                       np.array([[perf.get("acceptance_rate", 0.0)]], dtype=np.float32)))
        if row.flags["return_num_input_tokens"]:
            out.append(pb_utils.Tensor("num_input_tokens",
                                       np.array([[len(state["prepared"].input_ids)]], dtype=np.int32)))
        if row.flags["return_num_output_tokens"]:
            out.append(pb_utils.Tensor("num_output_tokens", np.array([[len(state["generated"])]], dtype=np.int32)))
        return out

    # --- model calls ------------------------------------------------------------------------------------------
    def call(self, model, inputs, outputs, decoupled=False):
        request = pb_utils.InferenceRequest(model_name=model, inputs=inputs, requested_output_names=outputs)
        if decoupled:
            return request.exec(decoupled=True)
        response = request.exec()
        if response.has_error():
            raise RequestError(f"{model}: {response.error().message()}")
        return response

    def preprocess(self, row):
        inputs = [pb_utils.Tensor("QUERY", row.text.reshape(1, 1)),
                  pb_utils.Tensor("REQUEST_OUTPUT_LEN", np.array([[row.max_tokens]], dtype=np.int32))]
        for name, array in row.pre.items():
            dtype = {"END_ID": np.int32, "PAD_ID": np.int32, "EMBEDDING_BIAS_WEIGHTS": np.float32,
                     "PROMPT_TABLE_EXTRA_ID": np.uint64}.get(name)
            inputs.append(pb_utils.Tensor(name, array.astype(dtype) if dtype else array))
        outputs = ["INPUT_ID", "REQUEST_INPUT_LEN", "DECODER_INPUT_ID", "BAD_WORDS_IDS", "STOP_WORDS_IDS",
                   "EMBEDDING_BIAS", "OUT_END_ID", "OUT_PAD_ID", "OUT_PROMPT_TABLE_EXTRA_IDS"]
        return Prepared(self.call("preprocessing", inputs, outputs))

    def decode(self, tokens):
        inputs = [pb_utils.Tensor("TOKENS_BATCH", np.array(tokens, dtype=np.int32).reshape(1, 1, -1)),
                  pb_utils.Tensor("SEQUENCE_LENGTH", np.array([[len(tokens)]], dtype=np.int32))]
        text = output(self.call("postprocessing", inputs, ["OUTPUT"]), "OUTPUT").reshape(-1)[0]  # [beams]
        return text.decode("utf-8") if isinstance(text, bytes) else str(text)

    def core_inputs(self, state, ids, output_len, *, drafts=None, draft_logits=None, streaming=False,
                    exclude=False, seed=None, generation_logits=None, min_tokens=None):
        """min_tokens: the call's minimum length (None: none), sent under the core's spelling."""
        row, prepared = state["row"], state["prepared"]
        inputs = [pb_utils.Tensor("input_ids", np.array([ids], dtype=np.int32)),
                  pb_utils.Tensor("input_lengths", np.array([[len(ids)]], dtype=np.int32)),
                  pb_utils.Tensor("request_output_len", np.array([[output_len]], dtype=np.int32)),
                  pb_utils.Tensor("end_id", np.array([[prepared.end_id]], dtype=np.int32)),
                  pb_utils.Tensor("pad_id", np.array([[prepared.pad_id]], dtype=np.int32)),
                  pb_utils.Tensor("exclude_input_in_output", np.array([[exclude]], dtype=bool)),
                  pb_utils.Tensor("streaming", np.array([[streaming]], dtype=bool))]
        for name, array in (("stop_words_list", prepared.stop), ("bad_words_list", prepared.bad)):
            if array is not None and array.size:
                inputs.append(pb_utils.Tensor(name, array.astype(np.int32)))
        if prepared.bias is not None and prepared.bias.size:
            inputs.append(pb_utils.Tensor("embedding_bias", prepared.bias.astype(np.float32)))
        for name, array in row.core.items():
            if generation_logits is not None and name == "return_generation_logits":
                continue
            inputs.append(pb_utils.Tensor(name, array))
        if generation_logits is not None:
            inputs.append(pb_utils.Tensor("return_generation_logits", np.array([[generation_logits]], dtype=bool)))
        if seed is not None:
            inputs.append(pb_utils.Tensor(self.seed_name, np.array([[seed]], dtype=np.uint64)))
        if min_tokens:
            inputs.append(pb_utils.Tensor(self.min_tokens_name, np.array([[min_tokens]], dtype=np.int32)))
        if prepared.decoder_input_ids is not None and prepared.decoder_input_ids.size:
            inputs.append(pb_utils.Tensor("decoder_input_ids", prepared.decoder_input_ids.astype(np.int32)))
        if prepared.prompt_table_extra_ids is not None and prepared.prompt_table_extra_ids.size:
            inputs.append(pb_utils.Tensor("prompt_table_extra_ids", prepared.prompt_table_extra_ids.astype(np.uint64)))
        if drafts:
            inputs.append(pb_utils.Tensor("draft_input_ids", np.array([drafts], dtype=np.int32)))
            if draft_logits is not None:
                inputs.append(pb_utils.Tensor("draft_logits", draft_logits[None].astype(np.float32)))
        return inputs

    def core_outputs(self, row, generation_logits=False):
        names = ["output_ids", "sequence_length"]
        if row.flags["return_perf_metrics"]:
            names += list(PERF_INT32) + list(PERF_INT64) + ["acceptance_rate"]
        for flag_name, outputs in LOGIT_OUTPUTS.items():
            if row.flags[flag_name] or (generation_logits and flag_name == "return_generation_logits"):
                names += list(outputs)
        if row.flags["return_num_input_tokens"]:
            names.append("num_input_tokens")
        if row.flags["return_num_output_tokens"]:
            names.append("num_output_tokens")
        return names

    def check_cancelled(self, state):
        sender = state["sender"]
        cancelled = sender.is_cancelled() if sender is not None else state["row"].request.is_cancelled()
        if cancelled:
            raise Cancelled()

    def tokens_of(self, response):
        ids = output(response, "output_ids")
        length = output(response, "sequence_length")
        if ids is None:
            return None
        n = int(length.reshape(-1)[0]) if length is not None else ids.shape[-1]
        return [int(t) for t in ids.reshape(-1, ids.shape[-1])[0][:n]]

    def keep_passthrough(self, state, response):
        row = state["row"]
        for flag_name, names in LOGIT_OUTPUTS.items():
            if row.flags[flag_name]:
                for name in names:
                    array = output(response, name)
                    if array is not None:
                        state["passthrough"][name] = array
        if row.flags["return_perf_metrics"]:
            for name in PERF_INT32 + PERF_INT64 + ("acceptance_rate",):
                array = output(response, name)
                if array is not None and array.size:
                    state["perf"][name] = array.reshape(-1)[0]

    # --- plain generation ---------------------------------------------------------------------------------------
    def generate(self, state, on_tokens):
        row, prepared = state["row"], state["prepared"]
        ids = prepared.input_ids
        stream = row.stream and self.target_decoupled
        inputs = self.core_inputs(state, ids, row.max_tokens, streaming=stream, exclude=stream, seed=row.seed,
                                  min_tokens=row.min_tokens)
        state["first_scheduled"] = time.time_ns()
        if not self.target_decoupled:
            response = self.call(self.target, inputs, self.core_outputs(row))
            tokens = self.tokens_of(response) or []
            state["generated"] = tokens[len(ids):]
            state["first_token"] = state["last_token"] = time.time_ns()
            self.keep_passthrough(state, response)
            return
        for response in self.call(self.target, inputs, self.core_outputs(row), decoupled=True):
            if response.has_error():
                raise RequestError(f"{self.target}: {response.error().message()}")
            tokens = self.tokens_of(response)
            if tokens is None:  # the empty final response of a stream
                continue
            self.keep_passthrough(state, response)
            now = time.time_ns()
            state["first_token"] = state["first_token"] or now
            state["last_token"] = now
            if stream:
                state["generated"] += tokens
                on_tokens()
                if state["sender"] is not None and state["sender"].is_cancelled():
                    # Stop relaying; the core finishes this request on its own (it is bounded by max_tokens).
                    raise Cancelled()
            else:
                state["generated"] = tokens[len(ids):]

    # --- speculative rounds ---------------------------------------------------------------------------------------
    def check_lengths(self, row, prompt_len):
        """Every round sends the whole text so far as a new prompt: it must fit the engines' max_input_len up to
        the last round (the engines check each call; this says why up front)."""
        if self.max_input_len is not None and prompt_len > self.max_input_len:
            raise RequestError(f"the prompt has {prompt_len} tokens, more than the engines' max_input_len="
                               f"{self.max_input_len}")
        if self.max_seq_len is not None and prompt_len + row.max_tokens > self.max_seq_len:
            raise RequestError(f"prompt ({prompt_len}) + max_tokens ({row.max_tokens}) exceeds the engines' "
                               f"max_seq_len={self.max_seq_len}; ask for fewer tokens")
        last_round = prompt_len + row.max_tokens - 1
        if self.max_input_len is not None and last_round > self.max_input_len:
            raise RequestError(f"speculative rounds resend the text so far as the prompt: prompt ({prompt_len}) + "
                               f"max_tokens ({row.max_tokens}) - 1 = {last_round} exceeds the engines' max_input_len="
                               f"{self.max_input_len}; ask for at most {self.max_input_len - prompt_len + 1} tokens, "
                               "send num_draft_tokens: 0, or build the engines with max_input_len >= max_seq_len")

    def speculate(self, state, on_tokens):
        row, prepared = state["row"], state["prepared"]
        self.check_lengths(row, len(prepared.input_ids))
        current = list(prepared.input_ids)
        generated = state["generated"]
        drafted = accepted = 0
        kv = {name: 0 for name in PERF_INT32[:3]}
        round_index = 0
        state["first_scheduled"] = time.time_ns()
        while len(generated) < row.max_tokens:
            self.check_cancelled(state)
            remaining = row.max_tokens - len(generated)
            k = min(row.num_draft_tokens, remaining - 1)
            missing = (row.min_tokens or 0) - len(generated)  # the client's minimum length not reached yet
            if missing > 1:
                k = min(k, missing - 1)  # end the round where the minimum is reached: its min_tokens covers it all
            if self.schedule is not None:
                k = min(k, draft_length(self.schedule, self.in_flight))
            # A scheduled length of 0 (too many rows in flight for drafting to pay): a plain round of as many
            # tokens as PLAIN_ROUND_ROUNDS fully accepted rounds would bring, decoded by the target alone
            plain = self.schedule is not None and k == 0 and row.num_draft_tokens > 0 and remaining > 1
            drafts, draft_logits = self.propose(state, current, k, round_index) if k > 0 else ([], None)
            wanted = len(drafts) + 1
            if plain:
                wanted = min(remaining, PLAIN_ROUND_ROUNDS * (row.num_draft_tokens + 1),
                             missing if missing > 1 else remaining)
            inputs = self.core_inputs(state, current, wanted, drafts=drafts, draft_logits=draft_logits,
                                      seed=round_seed(row.seed, round_index, 1),
                                      min_tokens=min(missing, wanted) if missing > 0 else None)
            response = self.call(self.target, inputs, self.core_outputs(row))
            produced = (self.tokens_of(response) or [])[len(current):][:remaining]
            for name in kv:
                array = output(response, name) if row.flags["return_perf_metrics"] else None
                if array is not None and array.size:
                    kv[name] += int(array.reshape(-1)[0])
            self.keep_round_log_probs(state, response, len(produced))
            a = accepted_prefix(drafts, produced)
            drafted += len(drafts)
            accepted += a
            round_index += 1
            if self.spec_metrics is not None:
                if plain:  # decoding steps that drafted nothing
                    self.spec_metrics.observe(len(produced), 0, 0, 0, [])
                else:  # the verification, then the target's plain steps up to the round's length
                    self.spec_metrics.observe_step(len(drafts), a)
                    self.spec_metrics.observe(plain_steps_after_verification(a, len(produced)), 0, 0, 0, [])
            if produced:
                now = time.time_ns()
                state["first_token"] = state["first_token"] or now
                state["last_token"] = now
            generated += produced
            current += produced
            state["perf"].update(kv, total_draft_tokens=drafted, total_accepted_draft_tokens=accepted,
                                 acceptance_rate=accepted / drafted if drafted else 0.0)
            on_tokens()
            # The target ends early at the end id or a stop word: it then returns fewer tokens than a
            # verification yields (the accepted drafts plus its own next token), or than a plain round asked for.
            ended = len(produced) < wanted if plain else (
                not produced or len(produced) < min(a + 1, wanted) or a + 1 < len(produced) < wanted)
            if ended or ends_with_stop_word(generated, prepared.stop_words):
                break

    def keep_round_log_probs(self, state, response, produced):
        """return_log_probs over speculative rounds: each round's target call reports the log probabilities of the
        tokens it produced (the target's at each accepted position and of its own next token, with the round's
        penalties and minimum length) and their cumulative sum (the end id's included where it ended the round).
        The request's output_log_probs are the rounds' in order (a streamed chunk: its round's), cum_log_probs their
        running sum."""
        if not state["row"].flags["return_log_probs"]:
            return
        values = output(response, "output_log_probs")
        cum = output(response, "cum_log_probs")
        if values is None or cum is None:
            raise RequestError(f"{self.target} returned no output_log_probs / cum_log_probs for return_log_probs")
        round_values = [float(v) for v in values.reshape(-1)[:produced]]
        state["log_probs"] += round_values
        state["cum_log_prob"] += float(cum.reshape(-1)[0])
        shown = round_values if state["streaming"] else state["log_probs"]
        state["passthrough"]["output_log_probs"] = np.array(shown, dtype=np.float32).reshape(1, 1, -1)
        state["passthrough"]["cum_log_probs"] = np.array([[state["cum_log_prob"]]], dtype=np.float32)

    def propose(self, state, current, k, round_index):
        row = state["row"]
        if self.speculative_method == "prompt_lookup":
            return prompt_lookup_drafts(current, self.max_matching_ngram_size, k), None
        # min_tokens = request_output_len = k: exactly k draft tokens, as upstream's BLS (lib/decode.py
        # _spec_generate sets the draft request's min_tokens to num_draft_tokens)
        inputs = self.core_inputs(state, current, k, seed=round_seed(row.seed, round_index, 2),
                                  generation_logits=row.use_draft_logits, min_tokens=k)
        response = self.call(self.draft, inputs, self.core_outputs(row, generation_logits=row.use_draft_logits))
        drafts = (self.tokens_of(response) or [])[len(current):][:k]
        logits = None
        if row.use_draft_logits and drafts:
            generation = output(response, "generation_logits")
            if generation is None:
                raise RequestError(f"{self.draft} returned no generation_logits: build the draft engine with "
                                   "--gather_generation_logits, or send use_draft_logits: false")
            logits = generation.reshape(-1, generation.shape[-2], generation.shape[-1])[0][-len(drafts):]
        return drafts, logits

    def is_ready(self):
        """Readiness beyond the stub's own health (Triton releases whose python backend asks the model, python
        backend PR #430): ready until finalize."""
        return self.running

    def finalize(self):
        self.running = False
        self.pool.shutdown(wait=False, cancel_futures=True)
