"""How long log flushes take, for the broker's metrics (Kafka's `LogFlushStats`, one for the
process as Kafka's is): a histogram of the milliseconds each partition log's sync took.

Thread-safety (docs/threads.md): flushes run on the scheduler's thread and the executors, so
`observe` and `copy` take a lock (held for a few additions).
"""

from __future__ import annotations

import bisect
import threading
from dataclasses import dataclass, field

#: upper bounds of the buckets, in milliseconds
FLUSH_BUCKETS_MS = (0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10_000)
_BOUNDS_NS = tuple(int(bound * 1_000_000) for bound in FLUSH_BUCKETS_MS)


@dataclass(frozen=True, slots=True)
class FlushTimes:
    """Counts per bucket of FLUSH_BUCKETS_MS (the last: above them all), their sum and count."""

    buckets: tuple[int, ...]
    sum_ns: int
    count: int


@dataclass(slots=True)
class FlushStats:
    _buckets: list[int] = field(default_factory=lambda: [0] * (len(_BOUNDS_NS) + 1))
    _sum_ns: int = 0
    _count: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def observe(self, elapsed_ns: int) -> None:
        with self._lock:
            self._buckets[bisect.bisect_left(_BOUNDS_NS, elapsed_ns)] += 1
            self._sum_ns += elapsed_ns
            self._count += 1

    def copy(self) -> FlushTimes:
        with self._lock:
            return FlushTimes(tuple(self._buckets), self._sum_ns, self._count)


#: every partition log's flushes in this process
FLUSHES = FlushStats()
