"""HTTP transport: Triton's generate extension (`/v2/models/<m>/generate`, `/generate_stream` server-sent events;
JSON keys are input tensor names), one keep-alive connection per session, in a request/response contract
(contracts.py)."""

from __future__ import annotations

import http.client
import json
import time
from typing import Iterator

from specbuild.validate.client.contracts import ENGINE, Contract
from specbuild.validate.client.results import Generation, GenerateParams


class HttpSession:
    """One keep-alive HTTP connection (use one per thread) for the generate endpoints."""

    def __init__(self, address: str, timeout_s: float = 120.0, contract: Contract = ENGINE):
        self.address = address
        self.contract = contract
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

    def request(
        self, method: str, path: str, body: bytes | None = None, headers: dict[str, str] | None = None
    ) -> http.client.HTTPResponse:
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

    def generate(
        self,
        model: str,
        prompt: str | None,
        params: GenerateParams,
        *,
        raw_body: bytes | None = None,
        request_id: str | None = None,
    ) -> Generation:
        """POST /v2/models/<model>/generate: one JSON response."""
        if raw_body is not None:
            body = raw_body
        else:
            values = self.contract.inputs(params, prompt, stream=False)
            body = json.dumps(self.contract.http_body(values, request_id)).encode()
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
            gen.error = str(d["error"])  # generate reports some errors with HTTP 200 (nvidia-pytriton 0.7.0)
        elif r.status != 200:
            gen.error = f"HTTP {r.status}"
        else:
            self.contract.absorb(gen, self.contract.parse_json(d), gen.end)
            gen.final = True
        return gen

    def generate_stream(
        self,
        model: str,
        prompt: str | None,
        params: GenerateParams,
        *,
        request_id: str | None = None,
        stop_after: int | None = None,
        stream_flag: bool = True,
    ) -> Generation:
        """POST /v2/models/<model>/generate_stream (server-sent events). stop_after: close the connection after
        that many responses (a client that goes away mid-stream). stream_flag: the streaming input (False for
        a model that is not decoupled: it then answers with one event)."""
        values = self.contract.inputs(params, prompt, stream=stream_flag)
        body = json.dumps(self.contract.http_body(values, request_id)).encode()
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
                self.contract.absorb(gen, self.contract.parse_json(event), t)
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
