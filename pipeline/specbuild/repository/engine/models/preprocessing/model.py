"""Triton `preprocessing` model (specbuild): text in, token ids out.

Self-contained (numpy, transformers, triton_python_backend_utils, and model_parameters.py / request_checks.py
beside it): it runs in NVIDIA's tritonserver containers, where specbuild is not installed. Tensor contract:
tensorrtllm_backend all_models/inflight_batcher_llm/preprocessing/{config.pbtxt,1/model.py}@v0.19.0.

Inputs (per request row): QUERY, REQUEST_OUTPUT_LEN, and optionally DECODER_QUERY, BAD_WORDS_DICT,
STOP_WORDS_DICT, EMBEDDING_BIAS_WORDS + EMBEDDING_BIAS_WEIGHTS, END_ID, PAD_ID, PROMPT_TABLE_EXTRA_ID; and
specbuild's MIN_TOKENS / MIN_LENGTH (the ensemble's two spellings of the minimum length). The multimodal inputs
(IMAGE_BYTES, IMAGE_URL, IMAGES, VIDEO_BYTES) are declared and refused in one sentence: specbuild serves text
models (multimodal_model_path is empty).
Outputs: INPUT_ID [batch, max_len] right-padded with the pad id, REQUEST_INPUT_LEN, DECODER_INPUT_ID and
REQUEST_DECODER_INPUT_LEN (the tokenized DECODER_QUERY, else [pad id] and 1, as upstream: the C++ backend reads
them for encoder-decoder models only), BAD_WORDS_IDS and STOP_WORDS_IDS in the [batch, 2, L] word-list format
(row 0: the words' token ids one after another, row 1: the end offset of each word, padded with -1),
EMBEDDING_BIAS [batch, vocab] (or [batch, 0]), REQUEST_OUTPUT_LEN, OUT_END_ID, OUT_PAD_ID (from the tokenizer
unless END_ID/PAD_ID are given), OUT_PROMPT_TABLE_EXTRA_IDS when PROMPT_TABLE_EXTRA_ID is given (per prompt
token: the extra id where the token is a prompt-table id, >= the vocabulary, else 0), OUT_MIN_TOKENS when a
minimum length is given.
"""

import json
import os

import numpy as np
import triton_python_backend_utils as pb_utils
from model_parameters import ParameterError, bool_parameter, parameter
from request_checks import max_tokens_problem, min_tokens_value

MULTIMODAL_INPUTS = {"IMAGE_BYTES": "image_bytes_input", "IMAGE_URL": "image_url_input", "IMAGES": "images",
                     "VIDEO_BYTES": "video_bytes_input"}


def load_tokenizer(config, model_name):
    tokenizer_dir = parameter(config, "tokenizer_dir")
    if tokenizer_dir is None:
        raise pb_utils.TritonModelException(f"{model_name}: parameter tokenizer_dir is empty — set it to the "
                                            "tokenizer folder of the target model")
    if not os.path.isdir(tokenizer_dir):
        raise pb_utils.TritonModelException(f"{model_name}: tokenizer_dir {tokenizer_dir} does not exist")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir, legacy=False, padding_side="left",
                                              trust_remote_code=False)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


class RequestError(Exception):
    """A problem with one request: answered with an error response, the model stays healthy."""


def text_rows(tensor, name):
    """A [batch, n] (or [batch]) BYTES tensor as a list of lists of str, strictly UTF-8."""
    array = tensor.as_numpy()
    if array.ndim == 1:
        array = array.reshape(-1, 1)
    rows = []
    for row in array:
        values = []
        for item in row.reshape(-1):
            if isinstance(item, bytes):
                try:
                    item = item.decode("utf-8")
                except UnicodeDecodeError as e:
                    raise RequestError(f"{name} is not valid UTF-8 ({e.reason} at byte {e.start})") from None
            values.append(str(item))
        rows.append(values)
    return rows


def optional_ints(request, name, batch):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    if tensor is None:
        return [None] * batch
    values = tensor.as_numpy().reshape(batch, -1)
    return [int(v[0]) if v.size else None for v in values]


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.tokenizer = load_tokenizer(config, "preprocessing")
        try:
            self.add_special_tokens = bool_parameter(config, "add_special_tokens", True)
        except ParameterError as e:
            raise pb_utils.TritonModelException(f"preprocessing: {e}") from None
        eos = self.tokenizer.eos_token_id
        pad = self.tokenizer.pad_token_id
        if eos is None:
            raise pb_utils.TritonModelException("preprocessing: the tokenizer has no eos token, so there is no end id "
                                                "— use a tokenizer with an eos_token")
        self.end_id = int(eos)
        self.pad_id = int(pad if pad is not None else eos)
        self.vocab_size = len(self.tokenizer)

    def execute(self, requests):
        responses = []
        for request in requests:
            try:
                responses.append(self.preprocess(request))
            except RequestError as e:
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(str(e))))
            except Exception as e:  # noqa: BLE001 - every failure becomes an error response
                responses.append(pb_utils.InferenceResponse(
                    error=pb_utils.TritonError(f"preprocessing failed: {type(e).__name__}: {e}")))
        return responses

    def preprocess(self, request):
        for name, client in MULTIMODAL_INPUTS.items():
            tensor = pb_utils.get_input_tensor_by_name(request, name)
            if tensor is not None and tensor.as_numpy().size:
                raise RequestError(f"{client} ({name}): multimodal inputs are not supported by this repository "
                                   "(specbuild serves text-only models) — send text_input only")
        query = pb_utils.get_input_tensor_by_name(request, "QUERY")
        if query is None:
            raise RequestError("text_input is required")
        queries = text_rows(query, "text_input")
        batch = len(queries)
        output_len_tensor = pb_utils.get_input_tensor_by_name(request, "REQUEST_OUTPUT_LEN")
        if output_len_tensor is None:
            raise RequestError(max_tokens_problem(None))
        output_len = output_len_tensor.as_numpy().reshape(batch, -1)
        for row in output_len:
            problem = max_tokens_problem(int(row[0]) if row.size else None)
            if problem:
                raise RequestError(problem)
        ids = []
        for (text, *_rest) in queries:
            if text == "":
                raise RequestError("text_input is empty — give a prompt")
            ids.append(self.tokenizer.encode(text, add_special_tokens=self.add_special_tokens))
        end_ids = [e if e is not None else self.end_id for e in optional_ints(request, "END_ID", batch)]
        pad_ids = [p if p is not None else self.pad_id for p in optional_ints(request, "PAD_ID", batch)]
        input_ids, lengths = self.pad(ids, pad_ids)
        decoder_input_ids, decoder_lengths = self.decoder_inputs(request, batch, pad_ids)
        outputs = [
            pb_utils.Tensor("INPUT_ID", input_ids),
            pb_utils.Tensor("REQUEST_INPUT_LEN", lengths),
            pb_utils.Tensor("DECODER_INPUT_ID", decoder_input_ids),
            pb_utils.Tensor("REQUEST_DECODER_INPUT_LEN", decoder_lengths),
            pb_utils.Tensor("BAD_WORDS_IDS", self.word_lists(request, "BAD_WORDS_DICT", batch)),
            pb_utils.Tensor("STOP_WORDS_IDS", self.word_lists(request, "STOP_WORDS_DICT", batch)),
            pb_utils.Tensor("EMBEDDING_BIAS", self.embedding_bias(request, batch)),
            pb_utils.Tensor("REQUEST_OUTPUT_LEN", output_len.astype(np.int32)[:, :1]),
            pb_utils.Tensor("OUT_END_ID", np.array(end_ids, dtype=np.int32).reshape(batch, 1)),
            pb_utils.Tensor("OUT_PAD_ID", np.array(pad_ids, dtype=np.int32).reshape(batch, 1)),
        ]
        extra = pb_utils.get_input_tensor_by_name(request, "PROMPT_TABLE_EXTRA_ID")
        if extra is not None and extra.as_numpy().size:
            extra_ids = extra.as_numpy().reshape(batch, -1)[:, :1].astype(np.uint64)
            table_ids = np.where(input_ids >= self.vocab_size, extra_ids, 0).astype(np.uint64)
            outputs.append(pb_utils.Tensor("OUT_PROMPT_TABLE_EXTRA_IDS", table_ids))
        min_tokens = self.min_tokens(request, batch)
        if min_tokens is not None:
            outputs.append(pb_utils.Tensor("OUT_MIN_TOKENS", min_tokens))
        return pb_utils.InferenceResponse(output_tensors=outputs)

    @staticmethod
    def pad(ids, pad_ids):
        width = max(len(x) for x in ids)
        padded = np.array([x + [pad_ids[i]] * (width - len(x)) for i, x in enumerate(ids)], dtype=np.int32)
        return padded, np.array([[len(x)] for x in ids], dtype=np.int32)

    def decoder_inputs(self, request, batch, pad_ids):
        """DECODER_QUERY tokenized like QUERY; without it [pad id] and length 1 per row (upstream's values)."""
        tensor = pb_utils.get_input_tensor_by_name(request, "DECODER_QUERY")
        if tensor is None or tensor.as_numpy().size == 0:
            return (np.array(pad_ids, dtype=np.int32).reshape(batch, 1), np.ones([batch, 1], dtype=np.int32))
        rows = text_rows(tensor, "decoder_text_input")
        if len(rows) != batch:
            raise RequestError(f"decoder_text_input has {len(rows)} rows for {batch} prompts")
        ids = [self.tokenizer.encode(text, add_special_tokens=self.add_special_tokens) or [pad_ids[i]]
               for i, (text, *_rest) in enumerate(rows)]
        return self.pad(ids, pad_ids)

    def min_tokens(self, request, batch):
        """OUT_MIN_TOKENS [batch, 1] from MIN_TOKENS or MIN_LENGTH (the same value), or None when neither."""
        a = optional_ints(request, "MIN_TOKENS", batch)
        b = optional_ints(request, "MIN_LENGTH", batch)
        if all(v is None for v in a + b):
            return None
        values = []
        for x, y in zip(a, b):
            value, problem = min_tokens_value(x, y)
            if problem:
                raise RequestError(problem)
            values.append(0 if value is None else value)
        return np.array(values, dtype=np.int32).reshape(batch, 1)

    def word_lists(self, request, name, batch):
        """[batch, 2, L]: row 0 the token ids of every word one after another, row 1 each word's end offset."""
        tensor = pb_utils.get_input_tensor_by_name(request, name)
        if tensor is None:
            return np.empty([batch, 2, 0], dtype=np.int32)
        rows = text_rows(tensor, name.replace("_DICT", "").lower())
        if len(rows) != batch:
            raise RequestError(f"{name.replace('_DICT', '').lower()} has {len(rows)} rows for {batch} prompts")
        flat_rows, offset_rows = [], []
        for words in rows:
            flat, offsets = [], []
            for word in words:
                if word == "":
                    continue
                ids = self.tokenizer.encode(word, add_special_tokens=False)
                if not ids:
                    continue
                flat += ids
                offsets.append(len(flat))
            flat_rows.append(flat)
            offset_rows.append(offsets)
        width = max(1, max(len(f) for f in flat_rows))
        if all(len(f) == 0 for f in flat_rows):
            return np.empty([batch, 2, 0], dtype=np.int32)
        out = np.zeros([batch, 2, width], dtype=np.int32)
        out[:, 1, :] = -1
        for i, (flat, offsets) in enumerate(zip(flat_rows, offset_rows)):
            out[i, 0, :len(flat)] = flat
            out[i, 1, :len(offsets)] = offsets
        return out

    def embedding_bias(self, request, batch):
        words_t = pb_utils.get_input_tensor_by_name(request, "EMBEDDING_BIAS_WORDS")
        weights_t = pb_utils.get_input_tensor_by_name(request, "EMBEDDING_BIAS_WEIGHTS")
        if words_t is None or weights_t is None:
            return np.empty([batch, 0], dtype=np.float32)
        words = text_rows(words_t, "embedding_bias_words")
        weights = weights_t.as_numpy().reshape(batch, -1)
        bias = np.zeros([batch, self.vocab_size], dtype=np.float32)
        for i in range(batch):
            row_words = [w for w in words[i] if w != ""]
            if len(row_words) != weights.shape[1]:
                raise RequestError(f"embedding_bias_words has {len(row_words)} words but embedding_bias_weights has "
                                   f"{weights.shape[1]} weights")
            for word, weight in zip(row_words, weights[i]):
                for token in self.tokenizer.encode(word, add_special_tokens=False):
                    bias[i, token] += float(weight)
        return bias
