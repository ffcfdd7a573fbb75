"""The queue registry: topic metadata (partition counts) and one queue per topic-partition.

Partition counts come from the cluster through a Kafka metadata request, are cached, refreshed
every `refresh_ms` (partition counts may grow) and persisted in `topics.json` in the spool
directory, so an agent restarted while the cluster is down still knows where events go.
Queues are created on demand and live in `<spool>/<topic>/<partition>.ring` (the `shm` class
keeps its memory ring in the same layout under its shared-memory directory).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path

from weir.agent.queue import Durability, PartitionQueue
from weir.clock import Clock
from weir.durable import write_atomically

TOPICS_FILE = "topics.json"
RING_SUFFIX = ".ring"
QUEUE_FILE_SUFFIXES = (RING_SUFFIX, ".held")

MetadataFetcher = Callable[[str], int]
"""Returns the partition count of a topic; raises UnknownTopicError or MetadataUnavailable."""


class UnknownTopicError(Exception):
    """The cluster does not have the topic and would not create it."""


class MetadataUnavailable(Exception):
    """The cluster could not be asked, and the topic has never been seen."""


class QueueRegistry:
    """Caches partition counts and owns every `PartitionQueue`. Thread-safe."""

    def __init__(
        self,
        spool: Path,
        fetch: MetadataFetcher,
        *,
        clock: Clock,
        queue_factory: Callable[[Path, str, int], PartitionQueue],
        refresh_ms: int = 30_000,
        also_scan: tuple[Path, ...] = (),
    ) -> None:
        self._spool = spool
        self._also_scan = also_scan
        self._fetch = fetch
        self._clock = clock
        self._make_queue = queue_factory
        self._refresh_ms = refresh_ms
        self._lock = threading.Lock()
        self._partitions: dict[str, int] = self._load()
        self._fetched_at: dict[str, int] = {}
        self._queues: dict[tuple[str, int], PartitionQueue] = {}
        self.on_new_queue: Callable[[PartitionQueue], None] = lambda q: None

    def partition_count(self, topic: str) -> int:
        now = self._clock.monotonic_ms()
        known = self._partitions.get(topic)
        if known is not None and now - self._fetched_at.get(topic, now) < self._refresh_ms:
            return known
        try:
            count = self._fetch(topic)
        except MetadataUnavailable:
            if known is None:
                raise
            return known
        self._remember(topic, max(count, known or 0))
        return self._partitions[topic]

    def queue(self, topic: str, partition: int) -> PartitionQueue:
        queue = self._queues.get((topic, partition))
        if queue is not None:
            return queue
        with self._lock:
            queue = self._queues.get((topic, partition))
            if queue is None:
                path = self._spool / topic / f"{partition}{RING_SUFFIX}"
                queue = self._queues[(topic, partition)] = self._make_queue(path, topic, partition)
                self.on_new_queue(queue)
            return queue

    def open_existing(self) -> list[PartitionQueue]:
        """Open every queue left in the spool directory (a restart resumes their backlog)."""
        for directory in (self._spool, *self._also_scan):
            for path in sorted(directory.glob("*/*")):
                if path.suffix in QUEUE_FILE_SUFFIXES and path.stem.isdigit():
                    self.queue(path.parent.name, int(path.stem))
        return self.queues()

    def queues(self) -> list[PartitionQueue]:
        with self._lock:
            return list(self._queues.values())

    def refresh_all(self) -> None:
        for topic in list(self._partitions):
            self._fetched_at.pop(topic, None)
            try:
                self.partition_count(topic)
            except (MetadataUnavailable, UnknownTopicError):
                continue

    def _remember(self, topic: str, count: int) -> None:
        with self._lock:
            changed = self._partitions.get(topic) != count
            self._partitions[topic] = count
            self._fetched_at[topic] = self._clock.monotonic_ms()
            if changed:
                lines = [json.dumps(self._partitions, sort_keys=True)]
                write_atomically(self._spool / TOPICS_FILE, lines)

    def _load(self) -> dict[str, int]:
        self._spool.mkdir(parents=True, exist_ok=True)
        path = self._spool / TOPICS_FILE
        if not path.exists():
            return {}
        return {str(k): int(v) for k, v in json.loads(path.read_text()).items()}


def durability_for(topic: str, classes: dict[str, Durability], default: Durability) -> Durability:
    return classes.get(topic, default)
