"""glibc's allocator told to keep freed memory for reuse (the embedding's batch arrays).

By default glibc hands every freed block of more than ~128 KiB-32 MiB back to the kernel
(``munmap``, or trimming the heap top), so each batch of :mod:`router.embed_hashing`, whose
temporaries are a few MiB each, page-faulted all of its memory in anew: about 40 % of the
embedding's CPU time in this project's VMs. With the thresholds raised, blocks below
``mmap_threshold`` come from the heap and up to ``trim_threshold`` of free heap is kept,
so a route worker's resident memory stays near its peak (~50 MB more) instead.

It changes no result: only where freed memory goes. A process without glibc's ``mallopt``
(musl, macOS) is left as it is.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import sys

log = logging.getLogger(__name__)

_M_TRIM_THRESHOLD = -1  # glibc's <malloc.h>
_M_MMAP_THRESHOLD = -3


@functools.cache
def keep_freed_memory(mmap_threshold: int = 32 << 20, trim_threshold: int = 128 << 20) -> bool:
    """Raise glibc's mmap and trim thresholds, once per process; whether it took."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt  # the C library this process runs on
    except (OSError, AttributeError):  # not glibc
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    done = bool(mallopt(_M_MMAP_THRESHOLD, mmap_threshold)) and bool(
        mallopt(_M_TRIM_THRESHOLD, trim_threshold)
    )
    if not done:
        log.debug("mallopt refused the thresholds; the allocator is left as it was")
    return done
