"""Loopback ports for a server: free ones, and whether one is taken (tritonserver would silently share it)."""

from __future__ import annotations

import socket


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago (the server may still lose a race; `start` then retries)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def port_in_use(host: str, port: int) -> bool:
    """True when something listens on host:port. tritonserver binds with SO_REUSEPORT, so a second server on a
    taken port starts without an error and shares the port with the first: check before starting."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # ignore TIME_WAIT leftovers of a stopped server
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


def free_ports(host: str, count: int) -> list[int]:
    """`count` distinct ports that were free a moment ago (all held open together while they are chosen)."""
    socks = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((host, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()
