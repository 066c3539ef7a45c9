"""Running a real tritonserver: a system one, or the CPU build shipped in the nvidia-pytriton wheel."""

from specbuild.serve.tritonserver import ServerBinary, TritonServer, find_tritonserver, free_port

__all__ = ["ServerBinary", "TritonServer", "find_tritonserver", "free_port"]
