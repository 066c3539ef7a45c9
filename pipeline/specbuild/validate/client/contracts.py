"""Request/response contracts: how the suite's `GenerateParams` become a served model's input tensors, and how its
responses are read back. One per `Runtime.contract`:

- `engine` — the engine flavour's ensemble / BLS (ensemble/config.pbtxt@2a9abd95): `text_input`, `max_tokens`,
  `top_k`, `stream`, ...; each streamed response carries its new text and specbuild's extra `output_ids`; perf
  values are numbers.
- `llm-api` — NVIDIA's llmapi `tensorrt_llm` (llmapi/tensorrt_llm/1/model.py@b35ac1b): `text_input`, `streaming`,
  `sampling_param_*`, `return_*`; every streamed response carries the *cumulative* text (turned into deltas
  here); no token ids at all; optional outputs, perf values included, arrive as BYTES strings; the prompt is echoed
  unless `sampling_param_exclude_input_from_output` is true; a request id travels as the JSON body's `id` over
  HTTP (Triton's generate extension) and as the gRPC request id.
"""

from __future__ import annotations

from typing import Any, ClassVar

from specbuild.validate.client.results import (
    Chunk,
    Generation,
    GenerateParams,
    Output,
    as_ids,
    as_number,
    as_text,
    first,
)


class Contract:
    name: ClassVar[str]
    has_ids: ClassVar[bool]  # responses carry the generated token ids
    cumulative: ClassVar[bool]  # each streamed response carries the whole text so far
    perf_outputs: ClassVar[tuple[str, ...]]
    stream_input: ClassVar[str]  # the input that asks for one response per step
    counters_may_read_zero: ClassVar[bool] = False  # servers of this contract may return all-zero draft counters
    client_models: ClassVar[tuple[str, ...]] = ()  # every model a client may call in such a repository

    def inputs(self, params: GenerateParams, prompt: str | bytes | None, *, stream: bool) -> dict[str, Any]:
        raise NotImplementedError

    def http_body(self, values: dict[str, Any], request_id: str | None) -> dict[str, Any]:
        """The generate JSON body for these inputs."""
        return values

    def parse_json(self, d: dict) -> Output:
        return Output(
            as_text(d.get("text_output")),
            as_ids(d.get("output_ids")) if self.has_ids else None,
            {k: v for k in self.perf_outputs if k in d and (v := as_number(d[k])) is not None},
        )

    def parse_grpc(self, result) -> tuple[Output, bool]:
        """One gRPC stream response and its final flag."""
        response = result.get_response()
        names = {o.name for o in response.outputs}
        text = ""
        if "text_output" in names:
            arr = result.as_numpy("text_output")
            if arr is not None and arr.size:
                text = as_text(arr.reshape(-1)[0])
        ids = None
        if self.has_ids and "output_ids" in names:
            arr = result.as_numpy("output_ids")
            ids = [int(x) for x in arr.reshape(-1) if int(x) >= 0] if arr is not None else None
        perf = {}
        for k in self.perf_outputs:
            if k in names:
                arr = result.as_numpy(k)
                if arr is not None and arr.size and (v := as_number(arr.reshape(-1)[0])) is not None:
                    perf[k] = v
        final_param = response.parameters.get("triton_final_response")
        final = bool(final_param.bool_param) if final_param is not None else False
        return Output(text, ids, perf), final

    def absorb(self, gen: Generation, out: Output, t: float) -> None:
        """Add one response to a generation (chunks hold the new text)."""
        if self.cumulative:
            new = out.text[len(gen.text) :] if out.text.startswith(gen.text) else ""
            gen.text = out.text  # a stop string may shorten the text on the last response
        else:
            new = out.text
            gen.text += new
        gen.chunks.append(Chunk(t, new, out.ids, dict(out.perf) or None))
        if out.ids is not None:
            gen.ids = (gen.ids or []) + out.ids
        gen.perf.update(out.perf)


class EngineContract(Contract):
    name = "engine"
    client_models = ("ensemble", "tensorrt_llm_bls")
    has_ids = True
    cumulative = False
    stream_input = "stream"
    perf_outputs = (
        "acceptance_rate",
        "total_accepted_draft_tokens",
        "total_draft_tokens",
        "num_input_tokens",
        "num_output_tokens",
        "arrival_time_ns",
        "first_scheduled_time_ns",
        "first_token_time_ns",
        "last_token_time_ns",
    )

    def inputs(self, params, prompt, *, stream):
        d: dict[str, Any] = {}
        if prompt is not None:
            d["text_input"] = prompt
        d["max_tokens"] = params.max_tokens
        if params.greedy:
            d["top_k"] = 1
        else:
            d["temperature"] = float(params.temperature)
            if params.top_k is not None:
                d["top_k"] = int(params.top_k)
            if params.top_p is not None:
                d["top_p"] = float(params.top_p)
        if params.seed is not None:
            d["seed"] = int(params.seed)
        if params.stop_words:
            d["stop_words"] = list(params.stop_words)
        if params.exclude_input_in_output is not None:
            d["exclude_input_in_output"] = bool(params.exclude_input_in_output)
        if params.return_perf_metrics:
            d["return_perf_metrics"] = True
        d["stream"] = bool(stream)
        d.update(params.extra)
        return d

    def parse_json(self, d: dict) -> Output:
        # engine perf outputs are numbers; kept strict (a malformed value is a malformed response)
        perf = {k: float(first(d[k])) for k in self.perf_outputs if k in d and first(d[k]) is not None}
        return Output(as_text(d.get("text_output")), as_ids(d.get("output_ids")), perf)


class LlmApiContract(Contract):
    name = "llm-api"
    has_ids = False
    cumulative = True
    stream_input = "streaming"
    counters_may_read_zero = True  # TensorRT-LLM <= 1.2.1 in the PyTorch flow (NVIDIA/TensorRT-LLM PR #17082)
    perf_outputs = (
        "acceptance_rate",
        "total_accepted_draft_tokens",
        "total_draft_tokens",
        "arrival_time_ns",
        "first_scheduled_time_ns",
        "first_token_time_ns",
        "last_token_time_ns",
        "kv_cache_reused_block",
        "kv_cache_hit_rate",
        "kv_cache_alloc_new_blocks",
        "kv_cache_alloc_total_blocks",
        "kv_cache_missed_block",
    )

    def inputs(self, params, prompt, *, stream):
        d: dict[str, Any] = {}
        if prompt is not None:
            d["text_input"] = prompt
        d["sampling_param_max_tokens"] = params.max_tokens
        if params.greedy:
            d["sampling_param_top_k"] = 1  # TorchSampler: top_k 1 is greedy
        else:
            d["sampling_param_temperature"] = float(params.temperature)
            if params.top_k is not None:
                d["sampling_param_top_k"] = int(params.top_k)
            if params.top_p is not None:
                d["sampling_param_top_p"] = float(params.top_p)
        if params.seed is not None:
            d["sampling_param_seed"] = int(params.seed)
        if params.stop_words:
            d["sampling_param_stop"] = list(params.stop_words)
        if params.exclude_input_in_output is not None:
            d["sampling_param_exclude_input_from_output"] = bool(params.exclude_input_in_output)
        if params.return_perf_metrics:
            d["sampling_param_return_perf_metrics"] = True
        d["streaming"] = bool(stream)
        d.update(params.extra)
        return d

    def http_body(self, values, request_id):
        return {**values, "id": request_id} if request_id else values


ENGINE, LLM_API = EngineContract(), LlmApiContract()
CONTRACTS: dict[str, Contract] = {c.name: c for c in (ENGINE, LLM_API)}


def contract(name: str) -> Contract:
    """The contract a runtime speaks (`Runtime.contract`)."""
    return CONTRACTS[name]
