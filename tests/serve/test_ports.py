"""specbuild.serve.ports: free ports, and taken ones detected (tritonserver would silently share them)."""

from __future__ import annotations

import socket

from specbuild.serve import ports


def test_free_port_is_bindable():
    port = ports.free_port()
    assert not ports.port_in_use("127.0.0.1", port)


def test_port_in_use_detects_a_listener():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        assert ports.port_in_use("127.0.0.1", s.getsockname()[1])
