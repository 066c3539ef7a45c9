"""Giving the heap's free pages back to the operating system when a reference core goes idle.

glibc keeps the memory a process frees: the pages of freed blocks stay resident in its heap arenas until reused,
and a busy decoder frees a lot (batch KV caches that grow and are replaced as requests join and leave, kept
prefixes, prefill activations), so after a burst the resident size stays near the burst's peak. `malloc_trim(0)`
returns the free pages of every arena (glibc >= 2.8 releases them inside the heaps too, not only at the top). It
takes the arenas' locks for a few to a hundred milliseconds, so the cores call it only once the executor has been
idle for a while, never between steps. Elsewhere than glibc it does nothing.
"""

from __future__ import annotations

import ctypes
import functools


@functools.lru_cache(maxsize=1)
def _malloc_trim():
    try:
        return ctypes.CDLL(None).malloc_trim  # the process's own libc
    except (OSError, AttributeError):  # not glibc (musl, macOS): nothing to call
        return None


def trim_heap() -> bool:
    """Return the free heap pages to the operating system; False where the C library cannot."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True
