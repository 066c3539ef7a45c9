"""Running a real tritonserver: a system one, or the CPU build shipped in the nvidia-pytriton wheel.

binary.py which server binary, and its environment; ports.py free and taken ports; server_log.py load errors
from the log in plain words; log_files.py where a log nobody named goes (beside the repository); server.py the
process (start, wait until ready, stop, nothing left behind); command.py `specbuild serve`; decode_cpus.py the CPUs
kept for the reference core's decoding thread.
"""

from specbuild.serve.binary import ServerBinary, find_tritonserver
from specbuild.serve.ports import free_port
from specbuild.serve.server import TritonServer

__all__ = ["ServerBinary", "TritonServer", "find_tritonserver", "free_port"]
