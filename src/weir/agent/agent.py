"""The agent: accepts events, stores them durably per topic-partition, and senders ship them.

`Agent.send` returns once the event is stored per its topic's durability class ("safely stored;
it will reach Kafka"); callers never wait for the cluster. Errors a caller can see are `SendError`
with a short machine-readable `code`. The agent never imports the broker: it is a client.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from weir.agent.config import AgentConfig
from weir.agent.event import Event, Headers, encode_event
from weir.agent.link import KafkaLink
from weir.agent.partitioner import StickyPartitioner, partition_for_key
from weir.agent.queue import Durability, PartitionQueue, QueueFullError
from weir.agent.registry import MetadataUnavailable, QueueRegistry, UnknownTopicError
from weir.agent.sender import Sender
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
    sender: str
    last_error: str | None


class Agent:
    """Owns the registry of queues, one sender per queue, and the shared `KafkaLink`."""

    def __init__(self, config: AgentConfig, *, clock: Clock | None = None) -> None:
        self.config = config
        self._clock = clock or SystemClock()
        self._link = KafkaLink(config.bootstrap_server, config.producer)
        self._sticky = StickyPartitioner()
        self._senders: dict[tuple[str, int], Sender] = {}
        self._stopping = threading.Event()
        self.registry = QueueRegistry(
            config.spool,
            self._link.partition_count,
            clock=self._clock,
            queue_factory=self._make_queue,
            refresh_ms=config.metadata_refresh_ms,
        )
        self.registry.on_new_queue = self._start_sender
        self.registry.open_existing()
        self._background = threading.Thread(target=self._housekeeping, daemon=True)
        self._background.start()

    # -- accepting events -------------------------------------------------------------------

    def send(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        headers: Headers | None = None,
    ) -> None:
        """Store one event durably per its topic's class; raises `SendError` if refused."""
        error = self.send_many([self.event(topic, value, key, headers)])[0]
        if error is not None:
            raise error

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
        for (topic, partition), indexes in by_queue.items():
            error = self._store(topic, partition, [events[i] for i in indexes])
            for i in indexes:
                results[i] = error
        return results

    def _partition(self, event: Event) -> int:
        if not event.topic or len(event.topic) > 249:
            raise SendError("INVALID_TOPIC", f"invalid topic name {event.topic!r}")
        if event.size > self.config.max_event_bytes:
            raise SendError(
                "EVENT_TOO_LARGE",
                f"event of {event.size} bytes exceeds the limit of {self.config.max_event_bytes}",
            )
        try:
            count = self.registry.partition_count(event.topic)
        except UnknownTopicError as exc:
            raise SendError("UNKNOWN_TOPIC", str(exc)) from exc
        except MetadataUnavailable as exc:
            raise SendError("METADATA_UNAVAILABLE", str(exc)) from exc
        if event.key is not None:
            return partition_for_key(event.key, count)
        return self._sticky.partition(event.topic, count)

    def _store(self, topic: str, partition: int, events: list[Event]) -> SendError | None:
        queue = self.registry.queue(topic, partition)
        try:
            queue.append([encode_event(e) for e in events])
        except QueueFullError as exc:
            return SendError("QUEUE_FULL", str(exc))
        return None

    # -- queues and senders -----------------------------------------------------------------

    def _make_queue(self, path: Path, topic: str, partition: int) -> PartitionQueue:
        return PartitionQueue(
            path,
            topic=topic,
            partition=partition,
            durability=self.config.durability(topic),
            capacity=self.config.queue_bytes,
            clock=self._clock,
            group_commit_ms=self.config.group_commit_ms,
            full_timeout_ms=self.config.full_timeout_ms,
        )

    def _start_sender(self, queue: PartitionQueue) -> None:
        sender = Sender(queue, self._link, clock=self._clock)
        self._senders[(queue.topic, queue.partition)] = sender
        sender.start()

    def _housekeeping(self) -> None:
        interval_s = self.config.flush_interval_ms / 1000
        last_refresh = self._clock.monotonic_ms()
        while not self._stopping.wait(interval_s):
            for queue in self.registry.queues():
                if queue.durability is Durability.LOGS:
                    queue.flush()
            if self._clock.monotonic_ms() - last_refresh >= self.config.metadata_refresh_ms:
                self.registry.refresh_all()
                last_refresh = self._clock.monotonic_ms()
            if not self._link.reachable:
                self._link.probe()

    # -- status and shutdown ----------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        queues = [self._queue_status(q) for q in self.registry.queues()]
        return {
            "cluster_reachable": self._link.reachable,
            "bootstrap_server": self.config.bootstrap_server,
            "queues": [asdict(q) for q in queues],
        }

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
        self._stopping.set()
        self._background.join()
        for sender in list(self._senders.values()):
            sender.stop()
        for queue in self.registry.queues():
            queue.close()
        self._link.close()
