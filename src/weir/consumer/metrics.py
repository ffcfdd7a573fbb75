"""The consumer framework's numbers and their Prometheus endpoint.

Owns the counters the fetchers and workers keep (`FetcherStats`, `WorkerStats`: plain ints, one
object per thread, so nothing is shared on the hot path), `Throughput` (records handled per
second over a sliding window) and `MetricsEndpoint`, which serves them in Prometheus' text
format at /metrics. Metrics are computed when scraped; nothing here talks to Kafka.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric

PREFIX = "weir_consumer_"
THROUGHPUT_WINDOW_S = 10.0


@dataclass(slots=True)
class WorkerStats:
    handled: int = 0  # records whose handler succeeded
    retries: int = 0
    dead_lettered: int = 0
    idle_s: float = 0.0  # time spent waiting for work


@dataclass(frozen=True, slots=True)
class PartitionOffsets:
    committed: int | None
    high_watermark: int | None

    @property
    def lag(self) -> int | None:
        if self.high_watermark is None:
            return None
        return max(0, self.high_watermark - (self.committed or 0))


@dataclass(slots=True)
class FetcherStats:
    fetched: int = 0
    buffered_peak: int = 0  # the most records ever buffered (queued or running) at once
    paused_partitions: int = 0
    results_pending: int = 0  # exactly-once results waiting for their commit
    pauses: int = 0  # partitions paused by back-pressure, over time
    rebalances: int = 0  # assignments received
    commits: int = 0
    commit_failures: int = 0
    member_id: str = ""
    partitions: dict[tuple[str, int], PartitionOffsets] = field(default_factory=dict)


class Throughput:
    """Handled records per second over the last THROUGHPUT_WINDOW_S, sampled by the caller."""

    def __init__(self) -> None:
        self._samples: deque[tuple[float, int]] = deque()
        self.rate = 0.0

    def sample(self, now_s: float, handled: int) -> None:
        self._samples.append((now_s, handled))
        while len(self._samples) > 2 and now_s - self._samples[1][0] >= THROUGHPUT_WINDOW_S:
            self._samples.popleft()
        first_s, first = self._samples[0]
        if now_s > first_s:
            self.rate = (handled - first) / (now_s - first_s)


@dataclass(frozen=True, slots=True)
class Snapshot:
    """What a scrape reports; built by the LogConsumer."""

    group: str
    fetchers: list[FetcherStats]
    workers: list[WorkerStats]
    queued: int
    buffered: int
    max_buffered: int
    throughput: float


class ConsumerCollector:
    """A prometheus_client collector over a LogConsumer's snapshot."""

    def __init__(self, snapshot: Callable[[], Snapshot]) -> None:
        self._snapshot = snapshot

    def collect(self) -> Iterator[Metric]:
        snap = self._snapshot()
        yield from self._record_counters(snap)
        yield from self._queue_gauges(snap)
        yield from self._group_metrics(snap)
        yield from self._partition_gauges(snap)

    def _record_counters(self, snap: Snapshot) -> Iterator[Metric]:
        workers, fetchers = snap.workers, snap.fetchers
        yield _counter("records_fetched", "Records fetched", sum(f.fetched for f in fetchers))
        yield _counter("records_handled", "Records handled", sum(w.handled for w in workers))
        yield _counter("retries", "Handler retries", sum(w.retries for w in workers))
        yield _counter(
            "records_dead_lettered",
            "Records sent to the dead-letter topic",
            sum(w.dead_lettered for w in workers),
        )
        yield _gauge("throughput", "Records handled per second, last 10 s", snap.throughput)
        yield _counter(
            "worker_idle_seconds",
            "Time the workers spent waiting for records, summed over workers",
            sum(w.idle_s for w in workers),
        )

    def _queue_gauges(self, snap: Snapshot) -> Iterator[Metric]:
        yield _gauge("queue_depth", "Records waiting for a worker", snap.queued)
        yield _gauge("buffered_records", "Records fetched and not finished", snap.buffered)
        pending = sum(f.results_pending for f in snap.fetchers)
        yield _gauge("results_pending", "Exactly-once results awaiting their commit", pending)
        yield _gauge("buffered_records_limit", "Bound on buffered records", snap.max_buffered)
        peak = max((f.buffered_peak for f in snap.fetchers), default=0)
        yield _gauge("buffered_records_peak", "Most buffered records seen at once", peak)

    def _group_metrics(self, snap: Snapshot) -> Iterator[Metric]:
        fetchers = snap.fetchers
        paused = sum(f.paused_partitions for f in fetchers)
        yield _gauge("paused_partitions", "Partitions paused by back-pressure", paused)
        yield _counter(
            "pauses", "Partition pauses by back-pressure", sum(f.pauses for f in fetchers)
        )
        yield _counter("rebalances", "Assignments received", sum(f.rebalances for f in fetchers))
        yield _counter("commits", "Offset commits", sum(f.commits for f in fetchers))
        yield _counter(
            "commit_failures", "Failed offset commits", sum(f.commit_failures for f in fetchers)
        )
        members = GaugeMetricFamily(
            PREFIX + "member", "Group membership of each fetcher", labels=["group", "member_id"]
        )
        for fetcher in fetchers:
            members.add_metric([snap.group, fetcher.member_id], 1)
        yield members

    def _partition_gauges(self, snap: Snapshot) -> Iterator[Metric]:
        labels = ["topic", "partition"]
        lag = GaugeMetricFamily(
            PREFIX + "lag", "High watermark minus committed offset", labels=labels
        )
        committed = GaugeMetricFamily(
            PREFIX + "committed_offset", "Committed offset", labels=labels
        )
        for fetcher in snap.fetchers:
            for (topic, partition), offsets in sorted(fetcher.partitions.items()):
                names = [topic, str(partition)]
                if offsets.lag is not None:
                    lag.add_metric(names, offsets.lag)
                if offsets.committed is not None:
                    committed.add_metric(names, offsets.committed)
        yield lag
        yield committed


def _counter(name: str, documentation: str, value: float) -> Metric:
    return CounterMetricFamily(PREFIX + name, documentation, value=value)


def _gauge(name: str, documentation: str, value: float) -> Metric:
    return GaugeMetricFamily(PREFIX + name, documentation, value=value)


class MetricsEndpoint:
    """An HTTP server on its own daemon thread answering GET /metrics."""

    def __init__(self, snapshot: Callable[[], Snapshot], host: str, port: int) -> None:
        registry = CollectorRegistry()
        registry.register(ConsumerCollector(snapshot))
        self._server, self._thread = start_http_server(port, host, registry)
        self.address = f"{host}:{self._server.server_port}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if threading.current_thread() is not self._thread:
            self._thread.join(5)
