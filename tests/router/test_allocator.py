"""router.allocator on this machine's glibc: freed heap blocks stay resident under the raised
thresholds, and release_freed_memory hands them back."""

from __future__ import annotations

import sys

import psutil
import pytest

from router.allocator import keep_freed_memory, release_freed_memory

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc only")
MiB = 1 << 20


def _rss() -> int:
    return psutil.Process().memory_info().rss


def test_freed_heap_stays_resident_until_released() -> None:
    assert keep_freed_memory()  # blocks under 32 MiB now come from the heap
    blocks = [bytearray(MiB) for _ in range(160)]  # written: resident
    pin = bytearray(MiB)  # above them on the heap: their space is a hole, not its top
    before_free = _rss()
    del blocks
    freed = _rss()
    assert freed > before_free - 32 * MiB  # the holes stayed resident
    free = release_freed_memory(keep_bytes=0)
    assert free is not None and free >= 128 * MiB  # glibc saw them free
    assert _rss() < freed - 96 * MiB  # and gave their pages back
    assert release_freed_memory(keep_bytes=1 << 40) is not None  # under the bound: no trim
    del pin
