"""What the broker allows its connections: how many (`max.connections`,
`max.connections.per.ip`) and how many bytes of requests they may hold between them while
receiving and handling (`queued.max.request.bytes`).

The request budget counts authenticated connections' frames larger than one receive
(`SMALL_FRAME_BYTES`) from the moment their size prefix arrives until their request has been
handled (a connection still authenticating never holds any, so it cannot stall the others); a
connection waiting for budget is not read, so its client is held back by TCP. Smaller frames are
never held back (they are in memory once read, whatever we decide), so small clients keep
working while large producers wait.
Waiters are served in arrival order, so a large frame is not starved by smaller ones.

Thread-safety (docs/threads.md): event-loop only.
"""

from __future__ import annotations

import asyncio
import collections
import logging

from weir.clock import Clock

log = logging.getLogger(__name__)

SMALL_FRAME_BYTES = 256 * 1024
REFUSAL_LOG_INTERVAL_MS = 10_000


class ConnectionLimiter:
    """Counts open connections per peer address; refuses those over the limits."""

    def __init__(self, max_connections: int, max_per_ip: int, clock: Clock) -> None:
        self.max_connections = max_connections
        self.max_per_ip = max_per_ip
        self._clock = clock
        self.open = 0
        self._per_ip: collections.Counter[str] = collections.Counter()
        self.refused = 0
        self._refused_since_log = 0
        self._last_log_ms: int | None = None

    def admit(self, ip: str) -> bool:
        """Count a new connection from `ip`; False (counted and logged) if it must be closed."""
        if self.open >= self.max_connections:
            self._refuse(ip, f"max.connections={self.max_connections} reached")
            return False
        if self._per_ip[ip] >= self.max_per_ip:
            self._refuse(ip, f"max.connections.per.ip={self.max_per_ip} reached")
            return False
        self.open += 1
        self._per_ip[ip] += 1
        return True

    def release(self, ip: str) -> None:
        self.open -= 1
        self._per_ip[ip] -= 1
        if self._per_ip[ip] <= 0:
            del self._per_ip[ip]

    def _refuse(self, ip: str, why: str) -> None:
        self.refused += 1
        self._refused_since_log += 1
        now = self._clock.monotonic_ms()
        if self._last_log_ms is None or now - self._last_log_ms >= REFUSAL_LOG_INTERVAL_MS:
            log.warning(
                "refused connection from %s: %s (%d refused since the last report, %d in all)",
                ip, why, self._refused_since_log, self.refused,
            )  # fmt: skip
            self._last_log_ms = now
            self._refused_since_log = 0


class RequestMemoryPool:
    """A byte budget shared by all connections, handed out first come, first served."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.used = 0
        #: bytes released since the broker last handed free memory back to the kernel
        self.released_since_trim = 0
        self._waiters: collections.deque[tuple[int, asyncio.Future[None]]] = collections.deque()

    async def acquire(self, size: int) -> None:
        """Wait until `size` bytes fit. `size` must not exceed the capacity."""
        if size > self.capacity:
            raise ValueError(f"{size} bytes can never fit in {self.capacity}")
        if not self._waiters and self.used + size <= self.capacity:
            self.used += size
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (size, waiter)
        self._waiters.append(entry)
        try:
            await waiter
        except BaseException:
            if waiter.done() and not waiter.cancelled():
                self.release(size)  # granted, but its task was cancelled before it resumed
            else:
                if entry in self._waiters:
                    self._waiters.remove(entry)
                self._grant()
            raise

    def release(self, size: int) -> None:
        self.used -= size
        self.released_since_trim += size
        self._grant()

    def _grant(self) -> None:
        while self._waiters and self.used + self._waiters[0][0] <= self.capacity:
            size, waiter = self._waiters.popleft()
            if waiter.done():
                continue
            self.used += size
            waiter.set_result(None)
