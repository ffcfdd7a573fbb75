"""What the broker counts as requests pass: per topic (bytes and messages in, bytes out), per
request (API, version, error codes, the time of each phase: `weir.broker.request_times`), ISR
changes and open connections per listener.

Everything is counted per request, per partition or per batch, never per record: a batch's
record count comes from its header. A scrape reads these through `snapshot`, on the loop.

Thread-safety (docs/threads.md): event-loop only. Plain dicts and ints, no locks: the scrape
thread never touches them; it asks the loop for a copy.
"""

from __future__ import annotations

import asyncio
import bisect
import enum
import functools
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from weir.broker.request_times import PHASES
from weir.protocol.apis import ApiKey, InterBrokerApiKey

#: upper bounds of the request time histogram's buckets, in milliseconds (Kafka's TotalTimeMs)
TOTAL_TIME_BUCKETS_MS = (0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000,
                         10_000, 30_000)  # fmt: skip
_BUCKET_BOUNDS_NS = tuple(int(bound * 1_000_000) for bound in TOTAL_TIME_BUCKETS_MS)


#: how often the event loop's idle share is sampled
LOOP_IDLE_INTERVAL_S = 1.0


@dataclass(slots=True)
class TopicCounters:
    """One topic's traffic through this broker (Kafka's BrokerTopicMetrics)."""

    bytes_in: int = 0
    messages_in: int = 0
    bytes_out: int = 0
    replication_bytes_out: int = 0


@dataclass(slots=True)
class TimeHistogram:
    """Request times: counts per bucket of TOTAL_TIME_BUCKETS_MS (the last one: above them all),
    their sum and count."""

    buckets: list[int] = field(default_factory=lambda: [0] * (len(_BUCKET_BOUNDS_NS) + 1))
    sum_ns: int = 0
    count: int = 0

    def observe(self, elapsed_ns: int) -> None:
        self.buckets[bisect.bisect_left(_BUCKET_BOUNDS_NS, elapsed_ns)] += 1
        self.sum_ns += elapsed_ns
        self.count += 1

    def copy(self) -> TimeHistogram:
        return TimeHistogram(list(self.buckets), self.sum_ns, self.count)


class BrokerStats:
    """The broker's counters since it started. Event-loop only (see the module)."""

    def __init__(self) -> None:
        #: (topic, partition) -> its traffic through this broker
        self.partitions: dict[tuple[str, int], TopicCounters] = {}
        #: (request name, version) -> requests answered
        self.requests: dict[tuple[str, int], int] = defaultdict(int)
        #: (request name, error name) -> errors counted (NONE once per request without one)
        self.errors: dict[tuple[str, str], int] = defaultdict(int)
        #: (request name, phase of request_times.PHASES) -> its times
        self.request_times: dict[tuple[str, str], TimeHistogram] = {}
        self.isr_shrinks = 0
        self.isr_expands = 0
        #: listener name -> connections open now
        self.connections: dict[str, int] = defaultdict(int)
        #: the share of the last sampling interval the event loop's thread spent off the CPU
        #: (it handles every request and every socket: Kafka's handler and network idle ratios)
        self.loop_idle_ratio = 1.0

    def _partition(self, topic: str, partition: int) -> TopicCounters:
        counters = self.partitions.get((topic, partition))
        if counters is None:
            counters = self.partitions[(topic, partition)] = TopicCounters()
        return counters

    def appended(self, topic: str, partition: int, size: int, records: int) -> None:
        """A client's batch of `records` records and `size` bytes appended as leader."""
        counters = self._partition(topic, partition)
        counters.bytes_in += size
        counters.messages_in += records

    def fetched(self, sizes: Iterable[tuple[str, int, int]], *, by_follower: bool) -> None:
        """Record bytes a fetch sends: (topic, partition, bytes) per partition read."""
        for topic, partition, size in sizes:
            counters = self._partition(topic, partition)
            if by_follower:
                counters.replication_bytes_out += size
            else:
                counters.bytes_out += size

    def answered(self, api_key: int, version: int, errors: Sequence[ErrorCode]) -> None:
        """A request answered with `errors` (its error codes other than NONE)."""
        name = request_name(api_key)
        self.requests[(name, version)] += 1
        if errors:
            for error in errors:
                self.errors[(name, error.name.upper())] += 1
        else:
            self.errors[(name, "NONE")] += 1

    def timed(self, api_key: int, phases: Sequence[int]) -> None:
        """A request's nanoseconds in each of `request_times.PHASES`."""
        name = request_name(api_key)
        for phase, elapsed_ns in zip(PHASES, phases, strict=True):
            histogram = self.request_times.get((name, phase))
            if histogram is None:
                histogram = self.request_times[(name, phase)] = TimeHistogram()
            histogram.observe(elapsed_ns)

    async def sample_loop_idle(self, interval_s: float = LOOP_IDLE_INTERVAL_S) -> None:
        """Until cancelled: each `interval_s`, the loop thread's CPU time against the wall
        clock's (`time.thread_time` read on the loop thread) gives `loop_idle_ratio`."""
        cpu, wall = time.thread_time(), time.monotonic()
        while True:
            await asyncio.sleep(interval_s)
            now_cpu, now_wall = time.thread_time(), time.monotonic()
            if now_wall > wall:
                busy = (now_cpu - cpu) / (now_wall - wall)
                self.loop_idle_ratio = min(max(1.0 - busy, 0.0), 1.0)
            cpu, wall = now_cpu, now_wall

    def isr_changed(self, before: int, after: int) -> None:
        """A leader's ISR went from `before` to `after` members."""
        if after < before:
            self.isr_shrinks += 1
        elif after > before:
            self.isr_expands += 1

    def connection_opened(self, listener: str) -> None:
        self.connections[listener] += 1

    def connection_closed(self, listener: str) -> None:
        self.connections[listener] -= 1


@functools.cache
def request_name(api_key: int) -> str:
    """Kafka's name of a request type, as its RequestMetrics label it: `ApiVersions`."""
    for keys in (ApiKey, InterBrokerApiKey):
        try:
            return _camel(keys(api_key))
        except ValueError:
            continue
    return str(api_key)


def _camel(key: enum.Enum) -> str:
    return "".join(part.capitalize() for part in key.name.split("_"))
