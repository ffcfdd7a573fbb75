"""The agent: accepts events, stores them durably per topic-partition, and senders ship them.

`Agent.send` returns once the event is stored per its topic's durability class ("safely stored;
it will reach Kafka"); callers never wait for the cluster. Errors a caller can see are `SendError`
with a short machine-readable `code`. Besides callers (in process, or through the socket server),
the agent tails the files of its configured inputs (`weir.agent.tail`) and serves Prometheus
metrics when given a port (`weir.agent.metrics`). The agent never imports the broker: it is a
client.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from weir.agent.config import AgentConfig
from weir.agent.event import Event, Headers, encode_event, encode_record, encode_unkeyed
from weir.agent.link import KafkaLink
from weir.agent.memory import SpillingQueue
from weir.agent.metrics import serve_metrics
from weir.agent.partitioner import StickyPartitioner, partition_for_key
from weir.agent.queue import DiskQueue, Durability, PartitionQueue, QueueFullError
from weir.agent.registry import MetadataUnavailable, QueueRegistry, UnknownTopicError
from weir.agent.sender import Sender
from weir.agent.tail import FileTailer
from weir.clock import Clock, SystemClock


class SendError(Exception):
    """An event was refused; nothing of it was stored. `code` names the reason."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True, slots=True)
class QueueStatus:
    topic: str
    partition: int
    durability: str
    depth: int
    bytes: int
    oldest_age_ms: int
    sent: int
    dropped: int
    spilled: int
    sender: str
    last_error: str | None


class TopicCounts:
    """Events offered, stored and refused per topic since the agent started. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.accepted: dict[str, int] = defaultdict(int)
        self.stored: dict[str, int] = defaultdict(int)
        self.rejected: dict[tuple[str, str], int] = defaultdict(int)

    def add(self, topic: str, count: int, error: SendError | None) -> None:
        with self._lock:
            self.accepted[topic] += count
            if error is None:
                self.stored[topic] += count
            else:
                self.rejected[(topic, error.code)] += count

    def snapshot(self) -> tuple[dict[str, int], dict[str, int], dict[tuple[str, str], int]]:
        with self._lock:
            return dict(self.accepted), dict(self.stored), dict(self.rejected)


class Agent:
    """Owns the registry of queues, one sender per queue, the shared `KafkaLink` and the tailer."""

    def __init__(self, config: AgentConfig, *, clock: Clock | None = None) -> None:
        self.config = config
        self._clock = clock or SystemClock()
        self._link = KafkaLink(config.bootstrap_server, config.producer)
        self._sticky = StickyPartitioner()
        self._senders: dict[tuple[str, int], Sender] = {}
        self._stopping = threading.Event()
        self.counts = TopicCounts()
        self.registry = QueueRegistry(
            config.spool,
            self._link.partition_count,
            clock=self._clock,
            queue_factory=self._make_queue,
            refresh_ms=config.metadata_refresh_ms,
            also_scan=(config.shared_memory_directory(),),
        )
        self.registry.on_new_queue = self._start_sender
        self.registry.open_existing()
        self._background = threading.Thread(target=self._housekeeping, daemon=True)
        self._background.start()
        self.tailer: FileTailer | None = None
        if config.inputs:
            self.tailer = self._start_tailer()
        self.metrics_server = None
        if config.metrics_port is not None:
            self.metrics_server = serve_metrics(self, config.metrics_host, config.metrics_port)

    # -- accepting events -------------------------------------------------------------------

    def send(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        headers: Headers | None = None,
    ) -> None:
        """Store one event durably per its topic's class; raises `SendError` if refused."""
        try:
            size = len(key or b"") + len(value or b"")
            if headers:
                size += sum(len(k) + len(v) for k, v in headers)
            partition = self._route(topic, key, size)
        except SendError as exc:
            self.counts.add(topic, 1, exc)
            raise
        payload = encode_record(self._clock.milliseconds(), key, value, headers)
        error = self._store_payloads(topic, partition, [payload])
        self.counts.add(topic, 1, error)
        if error is not None:
            raise error

    def send_batch(
        self,
        topic: str,
        values: Sequence[bytes | None],
        keys: Sequence[bytes | None] | None = None,
    ) -> list[SendError | None]:
        """Store many events of one topic; one result per event, None where it was stored.

        The events share one timestamp and, per partition, one append (a single durable write
        and, for `events`, a single wait for the flush). Unkeyed events all go to the sticky
        partition, so they are stored or refused together; keyed events are split by partition
        as `send` would place them, each partition's share stored or refused together.
        """
        results: list[SendError | None] = [None] * len(values)
        try:
            count = self._partition_count(topic)
        except SendError as exc:
            self.counts.add(topic, len(values), exc)
            return [exc] * len(values)
        stamp = self._clock.milliseconds()
        if keys is None:
            accepted = self._refuse_oversized(topic, values, None, results)
            partition = self._sticky.partition(topic, count, len(accepted))
            if len(accepted) < len(values):
                payloads = encode_unkeyed(stamp, [values[i] for i in accepted])
            else:
                payloads = encode_unkeyed(stamp, values)
            self._store_share(topic, partition, accepted, payloads, results)
            return results
        by_partition: dict[int, list[int]] = defaultdict(list)
        for index in self._refuse_oversized(topic, values, keys, results):
            key = keys[index]
            if key is None:
                by_partition[self._sticky.partition(topic, count)].append(index)
            else:
                by_partition[partition_for_key(key, count)].append(index)
        for partition, indexes in by_partition.items():
            payloads = [encode_record(stamp, keys[i], values[i]) for i in indexes]
            self._store_share(topic, partition, indexes, payloads, results)
        return results

    def _refuse_oversized(
        self,
        topic: str,
        values: Sequence[bytes | None],
        keys: Sequence[bytes | None] | None,
        results: list[SendError | None],
    ) -> list[int]:
        """Marks events over `max_event_bytes` refused; returns the indexes of the others."""
        limit = self.config.max_event_bytes
        sizes = [len(v or b"") for v in values]
        if keys is not None:
            sizes = [size + len(k or b"") for size, k in zip(sizes, keys, strict=True)]
        if max(sizes, default=0) <= limit:
            return list(range(len(values)))
        accepted = []
        for index, size in enumerate(sizes):
            if size > limit:
                results[index] = self._too_large(size)
                self.counts.add(topic, 1, results[index])
            else:
                accepted.append(index)
        return accepted

    def _store_share(
        self,
        topic: str,
        partition: int,
        indexes: list[int],
        payloads: list[bytes],
        results: list[SendError | None],
    ) -> None:
        if not indexes:
            return
        error = self._store_payloads(topic, partition, payloads)
        self.counts.add(topic, len(indexes), error)
        if error is not None:
            for index in indexes:
                results[index] = error

    def event(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        headers: Headers | None = None,
    ) -> Event:
        stamp = self._clock.milliseconds()
        return Event(topic=topic, value=value, key=key, headers=headers or [], timestamp_ms=stamp)

    def send_many(self, events: list[Event]) -> list[SendError | None]:
        """Store many events, sharing one durable write per queue; one result per event."""
        results: list[SendError | None] = [None] * len(events)
        by_queue: dict[tuple[str, int], list[int]] = defaultdict(list)
        for index, event in enumerate(events):
            try:
                by_queue[(event.topic, self._partition(event))].append(index)
            except SendError as exc:
                results[index] = exc
                self.counts.add(event.topic, 1, exc)
        for (topic, partition), indexes in by_queue.items():
            error = self._store(topic, partition, [events[i] for i in indexes])
            self.counts.add(topic, len(indexes), error)
            for i in indexes:
                results[i] = error
        return results

    def _partition(self, event: Event) -> int:
        return self._route(event.topic, event.key, event.size)

    def _route(self, topic: str, key: bytes | None, size: int) -> int:
        """The partition for an event, once its topic and size were found acceptable."""
        if size > self.config.max_event_bytes and _valid_topic(topic):
            raise self._too_large(size)
        count = self._partition_count(topic)
        if key is not None:
            return partition_for_key(key, count)
        return self._sticky.partition(topic, count)

    def _partition_count(self, topic: str) -> int:
        if not _valid_topic(topic):
            raise SendError("INVALID_TOPIC", f"invalid topic name {topic!r}")
        try:
            return self.registry.partition_count(topic)
        except UnknownTopicError as exc:
            raise SendError("UNKNOWN_TOPIC", str(exc)) from exc
        except MetadataUnavailable as exc:
            raise SendError("METADATA_UNAVAILABLE", str(exc)) from exc

    def _too_large(self, size: int) -> SendError:
        return SendError(
            "EVENT_TOO_LARGE",
            f"event of {size} bytes exceeds the limit of {self.config.max_event_bytes}",
        )

    def _store(self, topic: str, partition: int, events: list[Event]) -> SendError | None:
        return self._store_payloads(topic, partition, [encode_event(e) for e in events])

    def _store_payloads(
        self, topic: str, partition: int, payloads: list[bytes]
    ) -> SendError | None:
        queue = self.registry.queue(topic, partition)
        try:
            queue.append(payloads)
        except QueueFullError as exc:
            return SendError("QUEUE_FULL", str(exc))
        return None

    # -- queues and senders -----------------------------------------------------------------

    def _make_queue(self, path: Path, topic: str, partition: int) -> PartitionQueue:
        durability = self.config.durability(topic)
        if durability in (Durability.MEMORY, Durability.SHM):
            shm = self.config.shared_memory_directory() / topic / path.name
            return SpillingQueue(
                path,
                topic=topic,
                partition=partition,
                durability=durability,
                capacity=self.config.queue_bytes,
                clock=self._clock,
                reachable=lambda: self._link.reachable,
                shm_path=shm if durability is Durability.SHM else None,
            )
        return DiskQueue(
            path,
            topic=topic,
            partition=partition,
            durability=durability,
            capacity=self.config.queue_bytes,
            clock=self._clock,
            group_commit_ms=self.config.group_commit_ms,
            full_timeout_ms=self.config.full_timeout_ms,
        )

    def _start_tailer(self) -> FileTailer:
        tailer = FileTailer(
            self.config.inputs,
            spool=self.config.spool,
            store=self.send_many,
            make_event=self.event,
            flush=self.flush,
            clock=self._clock,
            max_event_bytes=self.config.max_event_bytes,
            poll_ms=self.config.tail_poll_ms,
            close_renamed_ms=self.config.tail_close_renamed_ms,
        )
        tailer.start()
        return tailer

    def _start_sender(self, queue: PartitionQueue) -> None:
        sender = Sender(queue, self._link, clock=self._clock)
        self._senders[(queue.topic, queue.partition)] = sender
        sender.start()

    def _housekeeping(self) -> None:
        interval_s = self.config.flush_interval_ms / 1000
        last_refresh = self._clock.monotonic_ms()
        while not self._stopping.wait(interval_s):
            for queue in self.registry.queues():
                if queue.durability is not Durability.EVENTS:
                    queue.flush()
            if self._clock.monotonic_ms() - last_refresh >= self.config.metadata_refresh_ms:
                self.registry.refresh_all()
                last_refresh = self._clock.monotonic_ms()
            if not self._link.reachable:
                self._link.probe()

    # -- status and shutdown ----------------------------------------------------------------

    @property
    def cluster_reachable(self) -> bool:
        return self._link.reachable

    def flush(self) -> None:
        """Make every queue's accepted events durable now (the `logs` interval, brought forward)."""
        for queue in self.registry.queues():
            queue.flush()

    def status(self) -> dict[str, Any]:
        queues = self.queue_statuses()
        tailed = self.tailer.positions() if self.tailer else []
        return {
            "cluster_reachable": self._link.reachable,
            "bootstrap_server": self.config.bootstrap_server,
            "queues": [asdict(q) for q in queues],
            "tailed_files": [asdict(p) for p in tailed],
        }

    def queue_statuses(self) -> list[QueueStatus]:
        return [self._queue_status(q) for q in self.registry.queues()]

    def _queue_status(self, queue: PartitionQueue) -> QueueStatus:
        state = queue.state()
        sender = self._senders.get((queue.topic, queue.partition))
        return QueueStatus(
            topic=queue.topic,
            partition=queue.partition,
            durability=queue.durability.value,
            depth=state.depth,
            bytes=state.used_bytes,
            oldest_age_ms=queue.oldest_age_ms() if state.depth else 0,
            sent=sender.sent if sender else 0,
            dropped=state.dropped,
            spilled=queue.spilled,
            sender=sender.state.value if sender else "none",
            last_error=sender.last_error if sender else None,
        )

    def wait_drained(self, timeout_s: float) -> bool:
        """True once every queue is empty (all accepted events acknowledged by the cluster)."""
        deadline = self._clock.monotonic_ms() + timeout_s * 1000
        while self._clock.monotonic_ms() < deadline:
            if all(q.state().depth == 0 for q in self.registry.queues()):
                return True
            self._stopping.wait(0.05)
        return False

    def close(self) -> None:
        if self.metrics_server is not None:
            self.metrics_server.shutdown()
            self.metrics_server.server_close()
        if self.tailer is not None:
            self.tailer.stop()
        self._stopping.set()
        self._background.join()
        senders = list(self._senders.values())
        for sender in senders:
            sender.request_stop()
        for sender in senders:
            sender.stop()
        for queue in self.registry.queues():
            queue.close()
        self._link.close()


def _valid_topic(topic: str) -> bool:
    return 0 < len(topic) <= 249
