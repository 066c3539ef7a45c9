"""Talking to a Triton server that serves a specbuild repository: generate (HTTP, HTTP SSE, gRPC stream), health.

Generation goes through Triton's generate extension (`/v2/models/<m>/generate`, `/generate_stream`: JSON keys are
input tensor names) and the gRPC stream of tritonclient. Health, configs and the repository index go through
tritonclient (HTTP and gRPC). Every call records client-side times (time.perf_counter) for the metrics.
"""

from __future__ import annotations

import http.client
import itertools
import json
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Iterator

from specbuild.errors import UserError

# Outputs a specbuild repository returns besides text_output (repository fact sheet §1.4, §1.7).
IDS_OUTPUT = "output_ids"  # generated token ids (specbuild's extra output on the ensemble and the BLS)
PERF_OUTPUTS = ("acceptance_rate", "total_accepted_draft_tokens", "total_draft_tokens",
                "num_input_tokens", "num_output_tokens", "arrival_time_ns", "first_scheduled_time_ns",
                "first_token_time_ns", "last_token_time_ns")

_request_counter = itertools.count()


def new_request_id(prefix: str = "sb") -> str:
    return f"{prefix}-{next(_request_counter)}-{time.monotonic_ns() % 10**9}"


@dataclass
class GenerateParams:
    """One generate request's inputs besides the prompt. temperature None means greedy (top_k 1)."""

    max_tokens: int
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    seed: int | None = None
    stop_words: list[str] | None = None
    exclude_input_in_output: bool | None = True
    return_perf_metrics: bool = True
    extra: dict[str, Any] = field(default_factory=dict)  # further inputs by tensor name (used by bad-input cases)

    @property
    def greedy(self) -> bool:
        return self.temperature is None

    def inputs(self, prompt: str | bytes | None, *, stream: bool) -> dict[str, Any]:
        """Input tensors by name, as JSON-able Python values (a bytes prompt stays bytes for gRPC)."""
        d: dict[str, Any] = {}
        if prompt is not None:
            d["text_input"] = prompt
        d["max_tokens"] = self.max_tokens
        if self.greedy:
            d["top_k"] = 1
        else:
            d["temperature"] = float(self.temperature)
            if self.top_k is not None:
                d["top_k"] = int(self.top_k)
            if self.top_p is not None:
                d["top_p"] = float(self.top_p)
        if self.seed is not None:
            d["seed"] = int(self.seed)
        if self.stop_words:
            d["stop_words"] = list(self.stop_words)
        if self.exclude_input_in_output is not None:
            d["exclude_input_in_output"] = bool(self.exclude_input_in_output)
        if self.return_perf_metrics:
            d["return_perf_metrics"] = True
        d["stream"] = bool(stream)
        d.update(self.extra)
        return d


@dataclass
class Chunk:
    """One streamed response: arrival time (perf_counter seconds), its text and token ids."""

    t: float
    text: str
    ids: list[int] | None


@dataclass
class Generation:
    """The outcome of one generate call, successful or not."""

    protocol: str  # http | http-stream | grpc-stream
    start: float
    end: float = 0.0
    text: str = ""
    ids: list[int] | None = None
    perf: dict[str, float] = field(default_factory=dict)
    chunks: list[Chunk] = field(default_factory=list)
    error: str | None = None
    status: int | None = None  # HTTP status, when HTTP
    request_id: str | None = None
    final: bool = False  # the stream ended with its final response (or the unary call returned)

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def latency(self) -> float:
        return self.end - self.start

    @property
    def num_tokens(self) -> int | None:
        if self.ids is not None:
            return len(self.ids)
        n = self.perf.get("num_output_tokens")
        return int(n) if n is not None else None


# --- value conversion -----------------------------------------------------------------------------------------

def _flatten(value: Any) -> list:
    if isinstance(value, list):
        return [x for v in value for x in _flatten(v)]
    return [value]


def _scalar(value: Any) -> Any:
    flat = _flatten(value)
    return flat[0] if flat else None


def _text(value: Any) -> str:
    if value is None:
        return ""
    flat = _flatten(value)
    if not flat:
        return ""
    v = flat[0]
    return v.decode("utf-8", errors="replace") if isinstance(v, bytes) else str(v)


def _ids(value: Any) -> list[int] | None:
    """Token ids of beam 0; -1 is padding (rows of a [beams, tokens] output are right-padded with -1)."""
    if value is None:
        return None
    return [int(x) for x in _flatten(value) if int(x) >= 0]


def outputs_from_json(d: dict) -> tuple[str, list[int] | None, dict[str, float]]:
    """text, generated ids and perf outputs of one generate response (JSON: outputs flattened)."""
    perf = {k: float(_scalar(d[k])) for k in PERF_OUTPUTS if k in d and _scalar(d[k]) is not None}
    return _text(d.get("text_output")), _ids(d.get(IDS_OUTPUT)), perf


def _absorb(gen: Generation, text: str, ids: list[int] | None, perf: dict, t: float) -> None:
    gen.chunks.append(Chunk(t, text, ids))
    gen.text += text
    if ids is not None:
        gen.ids = (gen.ids or []) + ids
    gen.perf.update(perf)


# --- HTTP -----------------------------------------------------------------------------------------------------

class HttpSession:
    """One keep-alive HTTP connection (use one per thread) for the generate endpoints."""

    def __init__(self, address: str, timeout_s: float = 120.0):
        self.address = address
        host, _, port = address.rpartition(":")
        self._host, self._port = host.strip("[]"), int(port)
        self.timeout_s = timeout_s
        self._conn: http.client.HTTPConnection | None = None

    def _connection(self) -> http.client.HTTPConnection:
        if self._conn is None:
            self._conn = http.client.HTTPConnection(self._host, self._port, timeout=self.timeout_s)
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def request(self, method: str, path: str, body: bytes | None = None,
                headers: dict[str, str] | None = None) -> http.client.HTTPResponse:
        hdrs = {"Content-Type": "application/json", **(headers or {})}
        for attempt in (0, 1):  # a kept-alive connection the server closed: reconnect once
            conn = self._connection()
            try:
                conn.request(method, path, body=body, headers=hdrs)
                return conn.getresponse()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                self.close()
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def get_status(self, path: str) -> int | None:
        try:
            r = self.request("GET", path)
            r.read()
            return r.status
        except OSError:
            self.close()
            return None

    def generate(self, model: str, prompt: str | None, params: GenerateParams, *, raw_body: bytes | None = None,
                 request_id: str | None = None) -> Generation:
        """POST /v2/models/<model>/generate: one JSON response."""
        body = raw_body if raw_body is not None else json.dumps(params.inputs(prompt, stream=False)).encode()
        gen = Generation("http", time.perf_counter(), request_id=request_id)
        headers = {"triton-request-id": request_id} if request_id else None
        try:
            r = self.request("POST", f"/v2/models/{model}/generate", body, headers)
            data = r.read()
            gen.end = time.perf_counter()
            gen.status = r.status
        except (OSError, http.client.HTTPException) as e:
            self.close()
            gen.end = time.perf_counter()
            gen.error = f"connection error: {type(e).__name__}: {e}"
            return gen
        try:
            d = json.loads(data or b"{}")
        except ValueError:
            gen.error = f"HTTP {r.status}: response is not JSON: {data[:200]!r}"
            return gen
        if not isinstance(d, dict):
            gen.error = f"HTTP {r.status}: unexpected JSON {str(d)[:200]}"
        elif "error" in d:
            gen.error = str(d["error"])  # generate reports some errors with HTTP 200 (triton-on-cpu §2)
        elif r.status != 200:
            gen.error = f"HTTP {r.status}"
        else:
            text, ids, perf = outputs_from_json(d)
            _absorb(gen, text, ids, perf, gen.end)
            gen.final = True
        return gen

    def generate_stream(self, model: str, prompt: str | None, params: GenerateParams, *,
                        request_id: str | None = None, stop_after: int | None = None,
                        stream_flag: bool = True) -> Generation:
        """POST /v2/models/<model>/generate_stream (server-sent events). stop_after: close the connection after
        that many responses (a client that goes away mid-stream). stream_flag: the `stream` input (False for
        a model that is not decoupled: it then answers with one event)."""
        body = json.dumps(params.inputs(prompt, stream=stream_flag)).encode()
        gen = Generation("http-stream", time.perf_counter(), request_id=request_id)
        headers = {"triton-request-id": request_id} if request_id else None
        try:
            r = self.request("POST", f"/v2/models/{model}/generate_stream", body, headers)
            gen.status = r.status
            if r.status != 200:
                data = r.read()
                gen.end = time.perf_counter()
                try:
                    gen.error = str(json.loads(data).get("error", f"HTTP {r.status}"))
                except (ValueError, AttributeError):
                    gen.error = f"HTTP {r.status}: {data[:200]!r}"
                return gen
            for event in _sse_events(r):
                t = time.perf_counter()
                if "error" in event:
                    gen.error = str(event["error"])
                    break
                text, ids, perf = outputs_from_json(event)
                _absorb(gen, text, ids, perf, t)
                if stop_after is not None and len(gen.chunks) >= stop_after:
                    self.close()
                    gen.error = "cancelled by the client"
                    break
            else:
                gen.final = True
            gen.end = time.perf_counter()
        except (OSError, http.client.HTTPException) as e:
            self.close()
            gen.end = time.perf_counter()
            gen.error = f"connection error: {type(e).__name__}: {e}"
        return gen


def _sse_events(response: http.client.HTTPResponse) -> Iterator[dict]:
    """The JSON payloads of a server-sent-events body, as they arrive."""
    data_lines: list[str] = []
    while True:
        line = response.readline()
        if not line:
            break
        s = line.decode("utf-8", errors="replace").rstrip("\r\n")
        if not s:
            if data_lines:
                payload = "\n".join(data_lines)
                data_lines = []
                try:
                    yield json.loads(payload)
                except ValueError:
                    yield {"error": f"malformed event: {payload[:200]}"}
            continue
        if s.startswith("data:"):
            data_lines.append(s[5:].lstrip())
    if data_lines:
        try:
            yield json.loads("\n".join(data_lines))
        except ValueError:
            yield {"error": "malformed final event"}


# --- gRPC -----------------------------------------------------------------------------------------------------

_NUMPY_TYPES = {"TYPE_BOOL": "bool", "TYPE_INT32": "int32", "TYPE_INT64": "int64", "TYPE_UINT64": "uint64",
                "TYPE_FP32": "float32", "TYPE_FP16": "float16", "TYPE_UINT8": "uint8", "TYPE_STRING": "object"}
_TRITON_TYPES = {"TYPE_BOOL": "BOOL", "TYPE_INT32": "INT32", "TYPE_INT64": "INT64", "TYPE_UINT64": "UINT64",
                 "TYPE_FP32": "FP32", "TYPE_FP16": "FP16", "TYPE_UINT8": "UINT8", "TYPE_STRING": "BYTES"}


@dataclass(frozen=True)
class ModelSignature:
    """What a model accepts: each input's config data_type and dims, and whether requests carry a batch dim."""

    inputs: dict[str, tuple[str, tuple[int, ...]]]
    max_batch_size: int
    decoupled: bool

    @classmethod
    def from_config(cls, config: dict) -> "ModelSignature":
        inputs = {i["name"]: (i.get("data_type", "TYPE_STRING"), tuple(int(d) for d in i.get("dims", [])))
                  for i in config.get("input", [])}
        decoupled = bool((config.get("model_transaction_policy") or {}).get("decoupled", False))
        return cls(inputs, int(config.get("max_batch_size", 0) or 0), decoupled)


def grpc_inputs(signature: ModelSignature, values: dict[str, Any], *, type_overrides: dict[str, str] | None = None):
    """tritonclient.grpc InferInputs for `values` (by input name), typed and shaped from the model's config.
    Names the config does not declare are sent as given (the server rejects them: a bad-input case)."""
    import numpy as np
    import tritonclient.grpc as grpcclient

    out = []
    for name, value in values.items():
        data_type, dims = signature.inputs.get(name, ("", ()))
        if type_overrides and name in type_overrides:
            data_type = type_overrides[name]
        if not data_type:
            data_type = "TYPE_STRING" if isinstance(value, (str, bytes)) else \
                "TYPE_FP32" if isinstance(value, float) else "TYPE_INT32"
        items = value if isinstance(value, list) else [value]
        if data_type == "TYPE_STRING":
            arr = np.array([v if isinstance(v, bytes) else str(v).encode() for v in items], dtype=object)
        else:
            arr = np.array(items, dtype=_NUMPY_TYPES.get(data_type, "int32"))
        if signature.max_batch_size > 0:
            arr = arr.reshape(1, -1)
        inp = grpcclient.InferInput(name, list(arr.shape), _TRITON_TYPES.get(data_type, "INT32"))
        inp.set_data_from_numpy(arr)
        out.append(inp)
    return out


def outputs_from_grpc(result) -> tuple[str, list[int] | None, dict[str, float], bool]:
    """text, ids, perf and the final flag of one gRPC stream response."""
    response = result.get_response()
    names = {o.name for o in response.outputs}
    text = ""
    if "text_output" in names:
        arr = result.as_numpy("text_output")
        if arr is not None and arr.size:
            v = arr.reshape(-1)[0]
            text = v.decode("utf-8", errors="replace") if isinstance(v, bytes) else str(v)
    ids = None
    if IDS_OUTPUT in names:
        arr = result.as_numpy(IDS_OUTPUT)
        ids = [int(x) for x in arr.reshape(-1) if int(x) >= 0] if arr is not None else None
    perf = {}
    for k in PERF_OUTPUTS:
        if k in names:
            arr = result.as_numpy(k)
            if arr is not None and arr.size:
                perf[k] = float(arr.reshape(-1)[0])
    final_param = response.parameters.get("triton_final_response")
    final = bool(final_param.bool_param) if final_param is not None else False
    return text, ids, perf, final


class GrpcSession:
    """One gRPC client with an open bidirectional stream (use one per thread); requests run one at a time."""

    def __init__(self, address: str, timeout_s: float = 120.0):
        import tritonclient.grpc as grpcclient

        self.address = address
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

    def generate(self, model: str, signature: ModelSignature, values: dict[str, Any], *,
                 request_id: str | None = None, stop_after: int | None = None,
                 type_overrides: dict[str, str] | None = None) -> Generation:
        """Send one request on the stream and collect its responses until the final one (or an error)."""
        request_id = request_id or new_request_id("grpc")
        gen = Generation("grpc-stream", time.perf_counter(), request_id=request_id)
        try:
            inputs = grpc_inputs(signature, values, type_overrides=type_overrides)
            self._ensure_stream()
            gen.start = time.perf_counter()
            self.client.async_stream_infer(model, inputs, request_id=request_id, enable_empty_final_response=True)
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
                self.close(cancel=True)  # errors are terminal (triton-on-cpu §2); start a fresh stream next time
                break
            rid = result.get_response().id
            if rid and rid != request_id:
                gen.error = f"response for request {rid!r} arrived on the stream of {request_id!r}"
                self.close(cancel=True)
                break
            text, ids, perf, final = outputs_from_grpc(result)
            if text or ids or perf:
                _absorb(gen, text, ids, perf, t)
            if final:
                gen.final = True
                break
            if stop_after is not None and len(gen.chunks) >= stop_after:
                self.close(cancel=True)
                gen.error = "cancelled by the client"
                break
        gen.end = time.perf_counter()
        return gen


# --- server-level queries -------------------------------------------------------------------------------------

class ServerClient:
    """Health, configs and the repository index through tritonclient (HTTP, and gRPC when given)."""

    def __init__(self, http: str, grpc: str | None = None, timeout_s: float = 30.0):
        self.http_address = http
        self.grpc_address = grpc
        self.timeout_s = timeout_s
        self._local = threading.local()  # tritonclient.http runs on gevent: one client per thread
        self._clients: list[Any] = []
        self._lock = threading.Lock()
        self._signatures: dict[str, ModelSignature] = {}
        self._configs: dict[str, dict] = {}

    def _client(self, kind: str):
        c = getattr(self._local, kind, None)
        if c is None:
            if kind == "http":
                import tritonclient.http as httpclient

                c = httpclient.InferenceServerClient(self.http_address, connection_timeout=self.timeout_s,
                                                     network_timeout=self.timeout_s)
            else:
                import tritonclient.grpc as grpcclient

                c = grpcclient.InferenceServerClient(self.grpc_address)
            setattr(self._local, kind, c)
            with self._lock:
                self._clients.append(c)
        return c

    @property
    def http(self):
        """This thread's tritonclient.http client."""
        return self._client("http")

    @property
    def grpc(self):
        """This thread's tritonclient.grpc client (None without a gRPC address)."""
        return self._client("grpc") if self.grpc_address else None

    def close(self) -> None:
        with self._lock:
            clients, self._clients = self._clients, []
        for c in clients:
            try:
                c.close()
            except Exception:  # noqa: BLE001
                pass

    def reachable(self) -> None:
        """UserError when no server answers on the HTTP address."""
        try:
            live = self.http.is_server_live()
        except Exception as e:  # noqa: BLE001 - connection refused and friends
            raise UserError(f"no Triton server answers at http://{self.http_address} ({type(e).__name__}: {e}) — "
                            "start one (specbuild serve triton_repo/<name>) or fix --url") from None
        if not live:
            raise UserError(f"the Triton server at http://{self.http_address} is not live")

    def config(self, model: str) -> dict:
        """The model's config as the server reports it (defaults filled in), fetched once."""
        cached = self._configs.get(model)
        if cached is None:
            cached = self.http.get_model_config(model)
            with self._lock:
                self._configs.setdefault(model, cached)
        return cached

    def signature(self, model: str) -> ModelSignature:
        cached = self._signatures.get(model)
        if cached is None:
            cached = ModelSignature.from_config(self.config(model))
            with self._lock:
                self._signatures.setdefault(model, cached)
        return cached

    def repository_index(self) -> list[dict]:
        return list(self.http.get_model_repository_index())

    def model_ready(self, model: str) -> bool:
        try:
            return bool(self.http.is_model_ready(model))
        except Exception:  # noqa: BLE001
            return False

    def health(self) -> dict[str, Any]:
        """live/ready over HTTP and gRPC, and every model of the repository index with its state."""
        out: dict[str, Any] = {}
        try:
            out["http_live"] = bool(self.http.is_server_live())
            out["http_ready"] = bool(self.http.is_server_ready())
        except Exception as e:  # noqa: BLE001
            out["http_live"] = out["http_ready"] = False
            out["http_error"] = f"{type(e).__name__}: {e}"
        if self.grpc is not None:
            try:
                out["grpc_live"] = bool(self.grpc.is_server_live())
                out["grpc_ready"] = bool(self.grpc.is_server_ready())
            except Exception as e:  # noqa: BLE001
                out["grpc_live"] = out["grpc_ready"] = False
                out["grpc_error"] = f"{type(e).__name__}: {e}"
        try:
            out["models"] = {e["name"]: {"state": e.get("state", ""), "reason": e.get("reason", ""),
                                         "ready": self.model_ready(e["name"])}
                             for e in self.repository_index() if "name" in e}
        except Exception as e:  # noqa: BLE001
            out["models"] = {}
            out["index_error"] = f"{type(e).__name__}: {e}"
        return out
