"""gRPC transport: tritonclient's bidirectional stream (one request at a time per session), inputs typed and shaped
from the served model's config, responses read in a request/response contract (contracts.py)."""

from __future__ import annotations

import queue
import time
from dataclasses import dataclass
from typing import Any

from specbuild.validate.client.contracts import ENGINE, Contract
from specbuild.validate.client.results import Generation, new_request_id

_NUMPY_TYPES = {
    "TYPE_BOOL": "bool",
    "TYPE_INT32": "int32",
    "TYPE_INT64": "int64",
    "TYPE_UINT64": "uint64",
    "TYPE_FP32": "float32",
    "TYPE_FP16": "float16",
    "TYPE_UINT8": "uint8",
    "TYPE_STRING": "object",
}
_TRITON_TYPES = {
    "TYPE_BOOL": "BOOL",
    "TYPE_INT32": "INT32",
    "TYPE_INT64": "INT64",
    "TYPE_UINT64": "UINT64",
    "TYPE_FP32": "FP32",
    "TYPE_FP16": "FP16",
    "TYPE_UINT8": "UINT8",
    "TYPE_STRING": "BYTES",
}


@dataclass(frozen=True)
class ModelSignature:
    """What a model accepts: each input's config data_type and dims, and whether requests carry a batch dim."""

    inputs: dict[str, tuple[str, tuple[int, ...]]]
    max_batch_size: int
    decoupled: bool

    @classmethod
    def from_config(cls, config: dict) -> "ModelSignature":
        inputs = {
            i["name"]: (i.get("data_type", "TYPE_STRING"), tuple(int(d) for d in i.get("dims", [])))
            for i in config.get("input", [])
        }
        decoupled = bool((config.get("model_transaction_policy") or {}).get("decoupled", False))
        return cls(inputs, int(config.get("max_batch_size", 0) or 0), decoupled)


def grpc_inputs(
    signature: ModelSignature,
    values: dict[str, Any],
    *,
    type_overrides: dict[str, str] | None = None,
    shapes: dict[str, tuple[int, ...]] | None = None,
):
    """tritonclient.grpc InferInputs for `values` (by input name), typed and shaped from the model's config.
    Names the config does not declare are sent as given (the server rejects them: a bad-input case);
    `type_overrides` (config data types) and `shapes` send some inputs otherwise (bad-input cases too)."""
    import numpy as np
    import tritonclient.grpc as grpcclient

    out = []
    for name, value in values.items():
        data_type, dims = signature.inputs.get(name, ("", ()))
        if type_overrides and name in type_overrides:
            data_type = type_overrides[name]
        if not data_type:
            data_type = (
                "TYPE_STRING"
                if isinstance(value, (str, bytes))
                else "TYPE_FP32"
                if isinstance(value, float)
                else "TYPE_INT32"
            )
        items = value if isinstance(value, list) else [value]
        if data_type == "TYPE_STRING":
            arr = np.array([v if isinstance(v, bytes) else str(v).encode() for v in items], dtype=object)
        else:
            arr = np.array(items, dtype=_NUMPY_TYPES.get(data_type, "int32"))
        if shapes and name in shapes:
            arr = arr.reshape(shapes[name])
        elif signature.max_batch_size > 0:
            arr = arr.reshape(1, -1)
        inp = grpcclient.InferInput(name, list(arr.shape), _TRITON_TYPES.get(data_type, "INT32"))
        inp.set_data_from_numpy(arr)
        out.append(inp)
    return out


class GrpcSession:
    """One gRPC client with an open bidirectional stream (use one per thread); requests run one at a time."""

    def __init__(self, address: str, timeout_s: float = 120.0, contract: Contract = ENGINE):
        import tritonclient.grpc as grpcclient

        self.address = address
        self.contract = contract
        self.timeout_s = timeout_s
        self.client = grpcclient.InferenceServerClient(address)
        self._queue: queue.Queue = queue.Queue()
        self._streaming = False

    def _callback(self, result=None, error=None) -> None:  # tritonclient calls it with keywords
        self._queue.put((time.perf_counter(), result, error))

    def _ensure_stream(self) -> None:
        if not self._streaming:
            self._queue = queue.Queue()
            self.client.start_stream(callback=self._callback)
            self._streaming = True

    def close(self, cancel: bool = False) -> None:
        if self._streaming:
            try:
                self.client.stop_stream(cancel_requests=cancel)
            except Exception:  # noqa: BLE001 - closing a broken stream must not raise
                pass
            self._streaming = False
        try:
            self.client.close()
        except Exception:  # noqa: BLE001
            pass

    def generate(
        self,
        model: str,
        signature: ModelSignature,
        values: dict[str, Any],
        *,
        request_id: str | None = None,
        stop_after: int | None = None,
        type_overrides: dict[str, str] | None = None,
        shapes: dict[str, tuple[int, ...]] | None = None,
        on_first=None,
        outputs: list[str] | None = None,
    ) -> Generation:
        """Send one request on the stream and collect its responses until the final one (or an error).
        on_first: called once the first response has arrived (e.g. to cancel the request from elsewhere).
        outputs: ask for these outputs only (default: every output the model declares)."""
        request_id = request_id or new_request_id("grpc")
        gen = Generation("grpc-stream", time.perf_counter(), request_id=request_id)
        try:
            inputs = grpc_inputs(signature, values, type_overrides=type_overrides, shapes=shapes)
            self._ensure_stream()
            gen.start = time.perf_counter()
            requested = None
            if outputs is not None:
                import tritonclient.grpc as grpcclient

                requested = [grpcclient.InferRequestedOutput(name) for name in outputs]
            self.client.async_stream_infer(
                model, inputs, request_id=request_id, enable_empty_final_response=True, outputs=requested
            )
        except Exception as e:  # noqa: BLE001 - tritonclient raises its own exception types
            gen.end = time.perf_counter()
            gen.error = f"{type(e).__name__}: {e}"
            self.close()
            return gen
        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                t, result, error = self._queue.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                gen.error = f"no final response within {self.timeout_s:.0f} s"
                self.close(cancel=True)
                break
            if error is not None:
                gen.error = str(error.message() if hasattr(error, "message") else error)
                self.close(cancel=True)  # errors are terminal (nvidia-pytriton 0.7.0): start a fresh stream next time
                break
            rid = result.get_response().id
            if rid and rid != request_id:
                gen.error = f"response for request {rid!r} arrived on the stream of {request_id!r}"
                self.close(cancel=True)
                break
            out, final = self.contract.parse_grpc(result)
            if out.text or out.ids or out.perf:
                self.contract.absorb(gen, out, t)
                if on_first is not None and len(gen.chunks) == 1:
                    on_first()
            if final:
                gen.final = True
                break
            if stop_after is not None and len(gen.chunks) >= stop_after:
                self.close(cancel=True)
                gen.error = "cancelled by the client"
                break
        gen.end = time.perf_counter()
        return gen
