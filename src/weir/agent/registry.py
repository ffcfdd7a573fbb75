"""The queue registry: topic metadata (partition counts) and one queue per topic-partition.

Partition counts come from the cluster through a Kafka metadata request, are cached, refreshed in
the background every `metadata_refresh_ms` (partition counts may grow) and persisted in
`topics.json` in the spool directory, so an agent restarted while the cluster is down still
knows where events go. A caller never waits for the cluster longer than `caller_wait_ms`, and not
at all while the cluster is unreachable: a topic whose count is not known then goes to its
pending queue (`weir.agent.pending`).
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
METADATA_WAIT_S = 10.0

MetadataFetcher = Callable[[str, float], int]
"""Returns the partition count of a topic, waiting at most the given seconds; raises
UnknownTopicError or MetadataUnavailable."""


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
        caller_wait_ms: int = 1000,
        reachable: Callable[[], bool] = lambda: True,
        also_scan: tuple[Path, ...] = (),
    ) -> None:
        self._spool = spool
        self._also_scan = also_scan
        self._fetch = fetch
        self._clock = clock
        self._make_queue = queue_factory
        self._caller_wait_s = caller_wait_ms / 1000
        self._reachable = reachable
        self._lock = threading.Lock()
        self._partitions: dict[str, int] = self._load()
        self._queues: dict[tuple[str, int], PartitionQueue] = {}
        self.on_new_queue: Callable[[PartitionQueue], None] = lambda q: None
        self.on_count_change: Callable[[str], object] = lambda topic: None

    def partition_count(self, topic: str) -> int | None:
        """The count a caller routes by: the cached one, else one question to a reachable
        cluster of at most `caller_wait_ms`; None when not known (the events go pending).
        Raises `UnknownTopicError` when the cluster answers that the topic does not exist."""
        known = self._partitions.get(topic)
        if known is not None or not self._reachable():
            return known
        try:
            return self._fetch_and_remember(topic, self._caller_wait_s)
        except MetadataUnavailable:
            return None

    def replace_count(self, topic: str, count: int) -> None:
        """The topic was recreated with `count` partitions (fewer than known)."""
        self._remember(topic, count)

    def known_count(self, topic: str) -> int | None:
        """The cached count, never asking the cluster."""
        return self._partitions.get(topic)

    def resolve(self, topic: str) -> int:
        """The cached count, else the cluster's answer however long it takes (background use)."""
        known = self._partitions.get(topic)
        if known is not None:
            return known
        return self._fetch_and_remember(topic, METADATA_WAIT_S)

    def _fetch_and_remember(self, topic: str, wait_s: float) -> int:
        count = self._fetch(topic, wait_s)
        self._remember(topic, max(count, self._partitions.get(topic, 0)))
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
        """Ask the cluster again for every known topic (partition counts may grow)."""
        for topic in list(self._partitions):
            try:
                self._fetch_and_remember(topic, METADATA_WAIT_S)
            except (MetadataUnavailable, UnknownTopicError):
                continue

    def _remember(self, topic: str, count: int) -> None:
        with self._lock:
            changed = self._partitions.get(topic) != count
            self._partitions[topic] = count
            if changed:
                lines = [json.dumps(self._partitions, sort_keys=True)]
                write_atomically(self._spool / TOPICS_FILE, lines)
        if changed:
            self.on_count_change(topic)

    def _load(self) -> dict[str, int]:
        self._spool.mkdir(parents=True, exist_ok=True)
        path = self._spool / TOPICS_FILE
        if not path.exists():
            return {}
        return {str(k): int(v) for k, v in json.loads(path.read_text()).items()}


def durability_for(topic: str, classes: dict[str, Durability], default: Durability) -> Durability:
    return classes.get(topic, default)
