"""The slow lane: file reads for connections that have stalled the event loop, done in threads
of their own (SEEDS.md §5, "Request queue split").

The broker answers every connection on one event loop, so a handler never waits on another
connection; what can stall them all is the loop itself blocking. Record bytes go out with
`sendfile`, which reads the file in the calling thread: bytes in the page cache cost nothing,
bytes on a slow or busy disk hold the loop for as long as the disk takes, and every client's
requests wait behind that read (a consumer of old offsets raises a producer's latency).

So each plaintext connection's sends are scored: a `sendfile` call that kept the loop for
longer than `slow.lane.send.threshold.ms` marks its connection slow for `SLOW_FOR_S`. A slow
connection's file slices are first read through in the lane's threads (`num.slow.lane.threads`),
which brings them into the page cache while the loop serves everyone else; the `sendfile` that
follows finds them there. The cost is one extra read of those bytes, paid only by connections
that read the disk. With `num.slow.lane.threads = 0` there is no lane. TLS connections read and
encrypt slices in user space already (`transport.py`) and are not scored.

Thread-safety (docs/threads.md): `mark` and `is_slow` on the event loop; `warm` runs the reads
in the lane's pool.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from weir.storage import FileSlice

log = logging.getLogger(__name__)

#: how long a connection stays in the slow lane after its last slow send
SLOW_FOR_S = 30.0
READ_CHUNK_BYTES = 1024 * 1024


class SlowLane:
    def __init__(
        self, threads: int, threshold_ms: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.threshold_ns = int(threshold_ms * 1_000_000)
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="weir-slow-lane")
        self._clock = clock
        self._slow_until: dict[int, float] = {}
        #: slices read through the lane, and connections marked slow, since the start
        self.warmed = 0
        self.marked = 0

    def is_slow(self, connection: int) -> bool:
        until = self._slow_until.get(connection)
        if until is None:
            return False
        if until < self._clock():
            del self._slow_until[connection]
            return False
        return True

    def note_send(self, connection: int, longest_call_ns: int, peer: str) -> None:
        """A file send of `connection` whose longest `sendfile` call held the loop that long."""
        if longest_call_ns < self.threshold_ns:
            return
        if connection not in self._slow_until:
            self.marked += 1
            log.info("connection from %s moved to the slow lane: a file send held the event "
                     "loop for %.1f ms", peer, longest_call_ns / 1e6)  # fmt: skip
        self._slow_until[connection] = self._clock() + SLOW_FOR_S

    def forget(self, connection: int) -> None:
        self._slow_until.pop(connection, None)

    async def warm(self, data: FileSlice) -> None:
        """Read the slice through in a lane thread (into the page cache)."""
        self.warmed += 1
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._pool, read_through, data.fd, data.position, data.size)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


def read_through(fd: int, position: int, size: int) -> None:
    """Read `size` bytes of `fd` from `position`, keeping none of them."""
    buffer = bytearray(min(size, READ_CHUNK_BYTES))
    view = memoryview(buffer)
    end = position + size
    while position < end:
        got = os.preadv(fd, [view[: min(len(buffer), end - position)]], position)
        if got <= 0:
            return
        position += got
