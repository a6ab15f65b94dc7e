"""glibc's allocator told to keep freed memory for reuse (the embedding's batch arrays).

By default glibc hands every freed block of more than ~128 KiB-32 MiB back to the kernel
(``munmap``, or trimming the heap top), so each batch of :mod:`router.embed_hashing`, whose
temporaries are a few MiB each, page-faulted all of its memory in anew: about 40 % of the
embedding's CPU time in this project's VMs. With the thresholds raised, blocks below
``mmap_threshold`` come from the heap and up to ``trim_threshold`` of free heap is kept,
so a route worker's resident memory stays near its peak (~50 MB more) instead.

The other side: glibc gives back only the top of the heap by itself, so a process whose
temporaries of changing sizes sit between long-lived small objects keeps every freed hole
resident (the monitor: hundreds of MB per registration). :func:`release_freed_memory`
hands those pages back (``malloc_trim``) when more than a given amount is free.

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


class _MallInfo2(ctypes.Structure):  # glibc >= 2.33 <malloc.h> struct mallinfo2
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd",
            "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost",
        )
    ]  # fmt: skip


def release_freed_memory(keep_bytes: int = 0) -> int | None:
    """Hand the heap's free pages back to the kernel (glibc ``malloc_trim``) when more than
    ``keep_bytes`` of it is free; returns the free heap bytes seen (None: not glibc, nothing
    done).

    With :func:`keep_freed_memory`'s thresholds every block under 32 MiB comes from the heap,
    and glibc returns only the top of the heap by itself: a process whose temporaries are
    a few MiB each and of changing sizes (the monitor scoring held-out documents: logits,
    output deltas, hashing copies) between long-lived small objects (its loss caches) keeps
    each freed hole resident, hundreds of MB per registration. ``malloc_trim`` releases
    the free pages inside the heap too (a few ms)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None)
        trim = libc.malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None
    free = None
    info = getattr(libc, "mallinfo2", None)
    if info is not None:
        info.restype = _MallInfo2
        free = int(info().fordblks)
        if free <= keep_bytes:
            return free
    trim.argtypes = (ctypes.c_size_t,)
    trim(0)
    return free
