"""Server-level queries through tritonclient (HTTP, and gRPC when given): health, model configs, the repository
index."""

from __future__ import annotations

import threading
from typing import Any

from specbuild.errors import UserError
from specbuild.validate.client.grpc_transport import ModelSignature


def _interrupts_not_printed_by_gevent() -> None:
    """tritonclient.http waits in gevent's hub; a Ctrl-C or SIGTERM (specbuild.processes.signals.Terminated) that lands there
    is re-raised in the waiting code (Hub.SYSTEM_ERROR) but first printed as a traceback, because KeyboardInterrupt
    is not in Hub.NOT_ERROR (gevent/hub.py). The CLI reports interruptions in one line of its own: add it there."""
    import gevent
    from gevent.hub import Hub

    for owner in (Hub, gevent.get_hub()):  # hubs to come, and this thread's (the one tritonclient will wait in)
        if not issubclass(KeyboardInterrupt, owner.NOT_ERROR):
            owner.NOT_ERROR = (*owner.NOT_ERROR, KeyboardInterrupt)


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

                _interrupts_not_printed_by_gevent()
                c = httpclient.InferenceServerClient(
                    self.http_address, connection_timeout=self.timeout_s, network_timeout=self.timeout_s
                )
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
        why = self.unreachable()
        if why is not None:
            raise UserError(
                f"no Triton server answers at http://{self.http_address} ({why}) — start one "
                "(specbuild serve triton_repo/<name>) or fix --url"
            )

    def unreachable(self) -> str | None:
        """Why the server does not answer its liveness probe (GET /v2/health/live), or None when it is live."""
        try:
            live = self.http.is_server_live()
        except Exception as e:  # noqa: BLE001 - connection refused and friends
            return f"{type(e).__name__}: {e}"
        return None if live else "it reports itself not live"

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

    def server_version(self) -> str | None:
        """The server's name and version as its metadata endpoint says (None when it does not answer)."""
        try:
            meta = self.http.get_server_metadata()
        except Exception:  # noqa: BLE001 - an identity detail, not a check
            return None
        return f"{meta.get('name', '?')} {meta.get('version', '?')}"

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
            out["models"] = {
                e["name"]: {
                    "state": e.get("state", ""),
                    "reason": e.get("reason", ""),
                    "ready": self.model_ready(e["name"]),
                }
                for e in self.repository_index()
                if "name" in e
            }
        except Exception as e:  # noqa: BLE001
            out["models"] = {}
            out["index_error"] = f"{type(e).__name__}: {e}"
        return out
