"""Process tuning for the broker, in one table: what is set, to what, and why.

glibc's allocator serves allocations above its mmap threshold from fresh mappings and hands the
top of its heap back to the kernel above its trim threshold. A produce request is received,
framed and decoded as a few buffers of its own size (hundreds of KiB to MiBs each), so with the
defaults every request costs mappings the kernel must fault in and zero page by page. Raising
both thresholds keeps those buffers in the heap from one request to the next. The memory stays
bounded by queued.max.request.bytes; the process keeps its high-water mark of it, until
`release_free_heap` (glibc's malloc_trim) hands free heap pages back once the request budget has
drained after large requests: the heap fragments under many slow connections, so the top-of-heap
trim alone leaves tens of MiB the broker no longer uses.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class AllocatorSetting:
    name: str
    param: int  # mallopt's parameter number
    value: int
    why: str


ALLOCATOR_SETTINGS = (
    AllocatorSetting("M_MMAP_THRESHOLD", -3, 32 * MIB,
                     "request buffers come from the heap, not from a fresh mapping each"),
    AllocatorSetting("M_TRIM_THRESHOLD", -1, 64 * MIB,
                     "freed request buffers stay in the heap for the next request"),
)  # fmt: skip


def apply_allocator_settings() -> None:
    """Set ALLOCATOR_SETTINGS with glibc's mallopt; a C library without it is left as it is."""
    mallopt = getattr(_libc(), "mallopt", None)
    if mallopt is None:
        log.info("no mallopt in this C library: allocator left at its defaults")
        return
    for setting in ALLOCATOR_SETTINGS:
        if mallopt(ctypes.c_int(setting.param), ctypes.c_int(setting.value)) != 1:
            log.warning("mallopt(%s) refused: %s", setting.name, setting.why)


@functools.cache
def _libc() -> Any:
    return ctypes.CDLL(ctypes.util.find_library("c"))


def release_free_heap() -> None:
    """Hand the heap's free pages back to the kernel (glibc's malloc_trim); nothing elsewhere."""
    trim = getattr(_libc(), "malloc_trim", None)
    if trim is not None:
        trim(ctypes.c_size_t(0))
