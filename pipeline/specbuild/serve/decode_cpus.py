"""A CPU of its own for the reference core's decoding thread.

On the CPU reference runtime the core model's executor thread does the decoding, while tritonserver, the
pre/post-processing stubs and the clients share the same CPUs; every time one of them takes the decoder's CPU, the
decoder waits on the run queue and comes back to cold caches (bench/README.md, "A CPU for the decoder": on 2 vCPUs
at 16 requests in flight, 15% of the decoder's time waiting to run and 9-12% more CPU for the same tokens). So the
launcher (`TritonServer(decode_cpus=...)`) keeps some CPUs for the decoder: tritonserver (and every stub it starts)
runs on the others, and the CPUs kept reach the core in the environment variable SPECBUILD_EXECUTOR_CPUS; the
reference cores (reference/core_models/engine, reference/core_models/llm_api) pin their executor thread there
(`claim`). A core that does not name that variable in its model.py (TensorRT-LLM's own backends) gets nothing kept.

The choice (`--decode-cpus`, SPECBUILD_DECODE_CPUS): `auto` keeps the highest-numbered CPUs this process may run
on, as many as the core's torch threads (SPECBUILD_TORCH_THREADS, default 1), when at least one is left for the
rest; `off` keeps none; a list (`3` or `2,3`) keeps those. Standard library only.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from specbuild.errors import UserError

CHOICE_ENV = "SPECBUILD_DECODE_CPUS"  # the user's choice: auto | off | a list of CPU ids
EXECUTOR_ENV = "SPECBUILD_EXECUTOR_CPUS"  # launcher -> core: the CPUs its executor thread runs on
CORE_MODEL = "tensorrt_llm"  # the target's core; a draft core (tensorrt_llm_draft) shares the other CPUs


@dataclass(frozen=True)
class CpuSplit:
    decode: frozenset[int]  # the core's executor thread
    rest: frozenset[int]  # tritonserver, its other stubs and threads, and our clients

    def env_value(self) -> str:
        return cpu_list(self.decode)


def cpu_list(cpus) -> str:
    """CPU ids as the variables and messages write them: '0,2,3'."""
    return ",".join(str(c) for c in sorted(cpus))


def allowed_cpus() -> set[int]:
    return set(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else set()


def parse_cpus(value: str, where: str) -> set[int]:
    try:
        cpus = {int(part) for part in value.split(",") if part.strip()}
    except ValueError:
        cpus = set()
    if not cpus or any(c < 0 for c in cpus):
        raise UserError(f"{where}={value!r}: give auto, off, or CPU ids such as 3 or 2,3")
    return cpus


def plan(choice: str, allowed: set[int], threads: int, where: str = CHOICE_ENV) -> CpuSplit | None:
    """The CPUs kept for the decoder and those left for the rest, or None (off, or too few CPUs for `auto`)."""
    choice = (choice or "auto").strip().lower()
    if choice == "off" or not allowed:
        return None
    if choice == "auto":
        if len(allowed) <= threads:
            return None
        decode = set(sorted(allowed)[-threads:])
    else:
        decode = parse_cpus(choice, where)
        if not decode <= allowed:
            raise UserError(
                f"{where}={choice!r}: CPU {min(decode - allowed)} is not one this process may run on "
                f"({cpu_list(allowed)}) — choose among those, or auto"
            )
        if decode == allowed:
            raise UserError(
                f"{where}={choice!r} keeps every CPU ({cpu_list(allowed)}) for the decoder and leaves "
                "none for tritonserver — keep fewer, or off"
            )
    return CpuSplit(frozenset(decode), frozenset(allowed - decode))


def honours(repository: Path) -> bool:
    """Whether the repository's core model pins its executor thread (names EXECUTOR_ENV in its model.py)."""
    model = Path(repository) / CORE_MODEL / "1" / "model.py"
    try:
        return EXECUTOR_ENV in model.read_text(errors="replace")
    except OSError:
        return False


def torch_threads() -> int:
    try:
        return max(1, int(os.environ.get("SPECBUILD_TORCH_THREADS", "1")))
    except ValueError:
        return 1


@contextlib.contextmanager
def running_on(cpus: frozenset[int] | set[int] | None) -> Iterator[None]:
    """The calling thread (and the threads and processes it starts meanwhile) on `cpus`; restored afterwards."""
    if not cpus or not hasattr(os, "sched_setaffinity"):
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def claim(model_name: str) -> set[int] | None:
    """In a core's executor thread: pin this thread to the CPUs the launcher kept for it (None: nothing kept, not
    the target's core, or the CPUs are not ours to take — then it runs where it would have)."""
    value = os.environ.get(EXECUTOR_ENV, "").strip()
    if not value or model_name != CORE_MODEL or not hasattr(os, "sched_setaffinity"):
        return None
    try:
        cpus = parse_cpus(value, EXECUTOR_ENV)
        os.sched_setaffinity(0, cpus)
    except (UserError, OSError):
        return None
    return cpus
