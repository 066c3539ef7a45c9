"""Where a deployment is served: its HTTP and gRPC addresses (host:port) and the model clients call."""

from __future__ import annotations

import re
from dataclasses import dataclass

from specbuild.errors import UserError

_HOSTPORT = re.compile(
    r"^(?:(?P<scheme>https?|grpc)://)?(?P<host>\[[0-9a-fA-F:]+\]|[A-Za-z0-9.\-_]+):(?P<port>\d{1,5})/?$"
)


def parse_hostport(value: str, option: str = "--url") -> str:
    """'HOST:PORT' (an http:// or grpc:// prefix is accepted and dropped) -> 'host:port'. UserError otherwise."""
    m = _HOSTPORT.match(value.strip())
    if not m or not 1 <= int(m.group("port")) <= 65535:
        raise UserError(f"{option} {value!r}: expected HOST:PORT, e.g. 127.0.0.1:8000")
    return f"{m.group('host')}:{int(m.group('port'))}"


def parse_metrics_url(value: str, option: str = "--metrics-url") -> str:
    """'HOST:PORT' or 'http://HOST:PORT[/metrics]' -> 'http://host:port/metrics'. UserError otherwise."""
    text = value.strip()
    if text.endswith("/metrics"):
        text = text[: -len("/metrics")]
    return f"http://{parse_hostport(text, option)}/metrics"


@dataclass(frozen=True)
class Endpoints:
    """A served deployment. `http` and `grpc` are 'host:port'; `model` is the model clients generate with
    (None: the recipe's serving model: the BLS for draft-target and prompt lookup, else the ensemble);
    `metrics` is the Prometheus URL (http://host:port/metrics), None when not given."""

    http: str
    grpc: str | None = None
    model: str | None = None
    metrics: str | None = None

    @classmethod
    def parse(
        cls,
        http: str,
        grpc: str | None = None,
        model: str | None = None,
        *,
        http_option: str = "--url",
        grpc_option: str = "--grpc-url",
        metrics: str | None = None,
        metrics_option: str = "--metrics-url",
    ) -> "Endpoints":
        return cls(
            parse_hostport(http, http_option),
            parse_hostport(grpc, grpc_option) if grpc else None,
            model,
            parse_metrics_url(metrics, metrics_option) if metrics else None,
        )

    @classmethod
    def of(cls, server, model: str | None = None) -> "Endpoints":
        """The endpoints of a running `specbuild.serve.TritonServer`."""
        return cls(server.http_address, server.grpc_url, model, getattr(server, "metrics_url", None))

    @property
    def loopback(self) -> bool:
        """The HTTP endpoint is on this machine (127.0.0.0/8, ::1 or localhost)."""
        host = self.http.rpartition(":")[0].strip("[]")
        return host == "localhost" or host == "::1" or host.startswith("127.")

    def describe(self) -> str:
        parts = [f"http {self.http}"]
        if self.grpc:
            parts.append(f"grpc {self.grpc}")
        if self.metrics:
            parts.append(f"metrics {self.metrics}")
        return ", ".join(parts)

    def to_dict(self) -> dict:
        return {"http": self.http, "grpc": self.grpc, "model": self.model, "metrics": self.metrics}
