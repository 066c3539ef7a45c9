"""Talking to a Triton server that serves a specbuild repository, by concern:

    results.py         GenerateParams (what to ask, contract-neutral), Generation / Chunk (what came back)
    contracts.py       the request/response contract of each flavour: `engine` (ensemble/BLS tensors, output_ids)
                       and `llm-api` (NVIDIA's llmapi tensorrt_llm: sampling_param_*, cumulative text, no ids)
    http_transport.py  HTTP generate and generate_stream (server-sent events)
    grpc_transport.py  the gRPC stream of tritonclient
    server.py          health, configs and the repository index (tritonclient HTTP/gRPC)

Every call records client-side times (time.perf_counter) for the metrics. Light at import: tritonclient and
numpy are imported only when used.
"""

from __future__ import annotations

from specbuild.validate.client.contracts import CONTRACTS, ENGINE, LLM_API, Contract, contract
from specbuild.validate.client.grpc_transport import GrpcSession, ModelSignature, grpc_inputs
from specbuild.validate.client.http_transport import HttpSession, _sse_events
from specbuild.validate.client.results import Chunk, Generation, GenerateParams, Output, new_request_id
from specbuild.validate.client.server import ServerClient

IDS_OUTPUT = "output_ids"  # generated token ids (specbuild's extra output on the ensemble and the BLS)
PERF_OUTPUTS = ENGINE.perf_outputs


def outputs_from_json(d: dict) -> tuple[str, list[int] | None, dict[str, float]]:
    """text, generated ids and perf outputs of one engine-contract generate response (JSON: outputs flattened)."""
    out = ENGINE.parse_json(d)
    return out.text, out.ids, out.perf


def outputs_from_grpc(result) -> tuple[str, list[int] | None, dict[str, float], bool]:
    """text, ids, perf and the final flag of one engine-contract gRPC stream response."""
    out, final = ENGINE.parse_grpc(result)
    return out.text, out.ids, out.perf, final


__all__ = [
    "CONTRACTS",
    "Chunk",
    "Contract",
    "ENGINE",
    "GenerateParams",
    "Generation",
    "GrpcSession",
    "HttpSession",
    "IDS_OUTPUT",
    "LLM_API",
    "ModelSignature",
    "Output",
    "PERF_OUTPUTS",
    "ServerClient",
    "_sse_events",
    "contract",
    "grpc_inputs",
    "new_request_id",
    "outputs_from_grpc",
    "outputs_from_json",
]
