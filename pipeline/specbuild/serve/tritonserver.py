"""The names compile.py and older callers import from here; the code lives in the modules of `specbuild.serve`:
binary (which tritonserver), ports, server_log (load errors in plain words), server (the process), command
(`specbuild serve`)."""

from specbuild.serve.binary import (ServerBinary, bundled_tritonserver, cache_dir, find_tritonserver,
                                    specbuild_source_root)
from specbuild.serve.ports import free_port, free_ports, port_in_use
from specbuild.serve.server import ADMIN_HEADER, TritonServer
from specbuild.serve.server_log import load_errors_from_log, plain_reason

__all__ = ["ADMIN_HEADER", "ServerBinary", "TritonServer", "bundled_tritonserver", "cache_dir", "find_tritonserver",
           "free_port", "free_ports", "load_errors_from_log", "plain_reason", "port_in_use", "specbuild_source_root"]
