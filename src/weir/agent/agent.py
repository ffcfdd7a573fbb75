"""The agent: accepts events, stores them durably per topic-partition, and senders ship them.

`Agent.send` returns once the event is stored per its topic's durability class ("safely stored;
it will reach Kafka"); callers never wait for the cluster: an event of a topic whose partition
count is not known yet goes to the topic's pending queue (`weir.agent.pending`). Errors a caller
can see are `SendError` with a short machine-readable `code`. Besides callers (in process, or
through the socket server), the agent tails the files of its configured inputs
(`weir.agent.tail`) and serves Prometheus metrics when given a port (`weir.agent.metrics`).
`Agent.close` stops within `shutdown_timeout_ms`. The agent never imports the broker: it is a
client.
"""

from __future__ import annotations

import functools
import logging
import re
import threading
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from weir.agent.config import AgentConfig, DeliveryGuarantee
from weir.agent.deadletter import DeadLetters
from weir.agent.event import (
    Event,
    Headers,
    encode_event,
    encode_record,
    encode_unkeyed,
    timestamp_prefix,
)
from weir.agent.exactly_once import INTENT_SUFFIX, AgentIdentity, RingTransactions
from weir.agent.link import KafkaLink
from weir.agent.memory import SpillingQueue
from weir.agent.metrics import serve_metrics
from weir.agent.partitioner import StickyPartitioner, partition_for_key
from weir.agent.pending import PendingRouter
from weir.agent.queue import DiskQueue, Durability, PartitionQueue, QueueFullError
from weir.agent.registry import (
    METADATA_WAIT_S,
    MetadataUnavailable,
    QueueRegistry,
    UnknownTopicError,
)
from weir.agent.ring import RingClosed
from weir.agent.route import DirectRoute
from weir.agent.sender import Sender
from weir.agent.status import QueueStatus, TopicCounts
from weir.agent.tail import FileTailer
from weir.clock import Clock, SystemClock

log = logging.getLogger(__name__)


class SendError(Exception):
    """An event was refused; nothing of it was stored. `code` names the reason."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class Agent:
    """Owns the registry of queues, one sender per queue, the pending topics, the shared
    `KafkaLink` and the tailer."""

    def __init__(self, config: AgentConfig, *, clock: Clock | None = None) -> None:
        self.config = config
        self._clock = clock or SystemClock()
        self._max_event_bytes = config.max_event_bytes
        self._link = KafkaLink(config.bootstrap_server, config.producer)
        self.identity = AgentIdentity.load_or_create(config.spool)
        self._sticky = StickyPartitioner()
        self._senders: dict[tuple[str, int], Sender] = {}
        self._stopping = threading.Event()
        self._closed = False
        self.counts = TopicCounts()
        self.registry = QueueRegistry(
            config.spool,
            self._link.partition_count,
            clock=self._clock,
            queue_factory=self._make_queue,
            caller_wait_ms=config.metadata_wait_ms,
            reachable=lambda: not self._link.known_down,
            also_scan=(config.shared_memory_directory(),),
        )
        self.registry.on_new_queue = self._start_sender
        self._routes: dict[str, DirectRoute] = {}
        self.registry.on_count_change = lambda topic: self._routes.pop(topic, None)
        self.registry.open_existing()
        self.pending = PendingRouter(
            config.spool,
            make_queue=self._make_pending_queue,
            lookup=self.registry.resolve,
            store=self._store_or_raise,
            dead_letters=DeadLetters(config.spool),
            sticky=self._sticky,
            clock=self._clock,
        )
        self.pending.open_existing()
        self.pending.start()
        self._background = threading.Thread(
            target=self._housekeeping, name="weir-agent-housekeeping", daemon=True
        )
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
        size = len(key or b"") + len(value or b"")
        if headers:
            size += sum(len(k) + len(v) for k, v in headers)
        route = self._routes.get(topic)
        if route is not None and size <= self._max_event_bytes and not self._closed:
            payload = encode_record(self._clock.milliseconds(), key, value, headers)
            error = self._append(route.queue_for(key), [payload])
        else:
            error = self._send_first(topic, key, value, headers, size)
        self.counts.add(topic, 1, error)
        if error is not None:
            raise error

    def _send_first(
        self, topic: str, key: bytes | None, value: bytes | None, headers: Headers | None, size: int
    ) -> SendError | None:
        """`send` for a topic without a direct route (yet): checks, pending or a new route."""
        error = self._refusal(topic, size)
        if error is not None:
            return error
        payload = encode_record(self._clock.milliseconds(), key, value, headers)
        route = self._direct_route(topic)
        if route is None:
            return self._store_topic(topic, [key], [payload])[0]
        return self._append(route.queue_for(key), [payload])

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
        as `send` would place them, each partition's share stored or refused together. While
        the topic's partition count is unknown they all go to its pending queue together.
        """
        results: list[SendError | None] = [None] * len(values)
        invalid = self._refusal(topic, 0)
        if invalid is not None:
            self.counts.add(topic, len(values), invalid)
            return [invalid] * len(values)
        stamp = self._clock.milliseconds()
        accepted = self._refuse_oversized(topic, values, keys, results)
        if keys is None:
            if len(accepted) < len(values):
                payloads = encode_unkeyed(stamp, [values[i] for i in accepted])
            else:
                payloads = encode_unkeyed(stamp, values)
            shares = self._store_topic(topic, None, payloads)
        else:
            kept = [keys[i] for i in accepted]
            payloads = [encode_record(stamp, keys[i], values[i]) for i in accepted]
            shares = self._store_topic(topic, kept, payloads)
        for index, error in zip(accepted, shares, strict=True):
            results[index] = error
        self._count_results(topic, shares)
        return results

    def send_many(self, events: list[Event]) -> list[SendError | None]:
        """Store many events, sharing one durable write per queue; one result per event."""
        results: list[SendError | None] = [None] * len(events)
        by_topic: dict[str, list[int]] = defaultdict(list)
        for index, event in enumerate(events):
            error = self._refusal(event.topic, event.size)
            if error is None:
                by_topic[event.topic].append(index)
            else:
                results[index] = error
                self.counts.add(event.topic, 1, error)
        for topic, indexes in by_topic.items():
            keys = [events[i].key for i in indexes]
            shares = self._store_topic(topic, keys, [encode_event(events[i]) for i in indexes])
            for index, error in zip(indexes, shares, strict=True):
                results[index] = error
            self._count_results(topic, shares)
        return results

    def send_records(
        self,
        topic: str,
        keys: Sequence[bytes | None],
        records: Sequence[bytes],
        sizes: Sequence[int],
    ) -> list[SendError | None]:
        """Store events of one topic given as untimed records (`weir.agent.event`: the stored
        form minus the timestamp, as the socket protocol carries them) with their keys and sizes;
        they share one timestamp. One result per event, as `send_batch`."""
        invalid = self._refusal(topic, 0)
        if invalid is not None:
            self.counts.add(topic, len(records), invalid)
            return [invalid] * len(records)
        stamp = timestamp_prefix(self._clock.milliseconds())
        if max(sizes, default=0) <= self._max_event_bytes:
            shares = self._store_topic(topic, keys, [stamp + r for r in records])
            self._count_results(topic, shares)
            return shares
        results: list[SendError | None] = [None] * len(records)
        accepted = self._refuse_oversized_sizes(topic, sizes, results)
        payloads = [stamp + records[i] for i in accepted]
        shares = self._store_topic(topic, [keys[i] for i in accepted], payloads)
        for index, error in zip(accepted, shares, strict=True):
            results[index] = error
        self._count_results(topic, shares)
        return results

    def event(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        headers: Headers | None = None,
    ) -> Event:
        stamp = self._clock.milliseconds()
        return Event(topic=topic, value=value, key=key, headers=headers or [], timestamp_ms=stamp)

    def _refusal(self, topic: str, size: int) -> SendError | None:
        """Why an event is refused before anything is stored, or None."""
        if self._closed:
            return SendError("AGENT_STOPPED", "the agent is stopping")
        if not _valid_topic(topic):
            return SendError("INVALID_TOPIC", f"invalid topic name {topic!r}")
        if size > self._max_event_bytes:
            return self._too_large(size)
        return None

    def _refuse_oversized(
        self,
        topic: str,
        values: Sequence[bytes | None],
        keys: Sequence[bytes | None] | None,
        results: list[SendError | None],
    ) -> list[int]:
        """Marks events over `max_event_bytes` refused; returns the indexes of the others."""
        sizes = [len(v or b"") for v in values]
        if keys is not None:
            sizes = [size + len(k or b"") for size, k in zip(sizes, keys, strict=True)]
        if max(sizes, default=0) <= self._max_event_bytes:
            return list(range(len(values)))
        return self._refuse_oversized_sizes(topic, sizes, results)

    def _refuse_oversized_sizes(
        self, topic: str, sizes: Sequence[int], results: list[SendError | None]
    ) -> list[int]:
        accepted = []
        for index, size in enumerate(sizes):
            if size > self._max_event_bytes:
                results[index] = self._too_large(size)
                self.counts.add(topic, 1, results[index])
            else:
                accepted.append(index)
        return accepted

    def _count_results(self, topic: str, results: list[SendError | None]) -> None:
        stored = results.count(None)
        if stored:
            self.counts.add(topic, stored, None)
        for error in results:
            if error is not None:
                self.counts.add(topic, 1, error)

    def _too_large(self, size: int) -> SendError:
        return SendError(
            "EVENT_TOO_LARGE",
            f"event of {size} bytes exceeds the limit of {self._max_event_bytes}",
        )

    # -- routing ----------------------------------------------------------------------------

    def _direct_route(self, topic: str) -> DirectRoute | None:
        """The topic's direct route, made if its count is known and nothing is pending."""
        count = self.registry.known_count(topic)
        if count is None or self.pending.holds(topic):
            return None
        route = self._routes.get(topic)
        if route is None or route.count != count:
            route = DirectRoute(topic, count, queue_of=self.registry.queue, sticky=self._sticky)
            self._routes[topic] = route
        return route

    def _store_topic(
        self, topic: str, keys: Sequence[bytes | None] | None, payloads: list[bytes]
    ) -> list[SendError | None]:
        """Store one topic's events in order: in its pending queue while it has one or its
        partition count is unknown, else each in its partition queue (`keys` None: unkeyed,
        all in the sticky partition). One result per event."""
        if not payloads:
            return []
        try:
            count = self._partition_count(topic)
            if self._stored_pending(topic, count, payloads):
                return [None] * len(payloads)
            if count is None:
                count = self._partition_count(topic)
            if count is None:
                raise SendError("METADATA_UNAVAILABLE", f"no partition count for {topic!r}")
        except SendError as exc:
            return [exc] * len(payloads)
        return self._store_partitioned(topic, count, keys, payloads)

    def _stored_pending(self, topic: str, count: int | None, payloads: list[bytes]) -> bool:
        if count is not None and not self.pending.holds(topic):
            return False
        try:
            return self.pending.append(topic, payloads, unknown=count is None)
        except QueueFullError as exc:
            raise SendError("QUEUE_FULL", str(exc)) from exc
        except RingClosed as exc:
            raise SendError("AGENT_STOPPED", "the agent is stopping") from exc

    def _store_partitioned(
        self, topic: str, count: int, keys: Sequence[bytes | None] | None, payloads: list[bytes]
    ) -> list[SendError | None]:
        if keys is None or keys.count(None) == len(keys):
            partition = self._sticky.partition(topic, count, len(payloads))
            return [self._store_payloads(topic, partition, payloads)] * len(payloads)
        if count == 1:
            return [self._store_payloads(topic, 0, payloads)] * len(payloads)
        by_partition: dict[int, list[int]] = defaultdict(list)
        for index, key in enumerate(keys):
            if key is None:
                by_partition[self._sticky.partition(topic, count)].append(index)
            else:
                by_partition[partition_for_key(key, count)].append(index)
        results: list[SendError | None] = [None] * len(payloads)
        for partition, indexes in by_partition.items():
            error = self._store_payloads(topic, partition, [payloads[i] for i in indexes])
            for index in indexes:
                results[index] = error
        return results

    def _partition_count(self, topic: str) -> int | None:
        try:
            return self.registry.partition_count(topic)
        except UnknownTopicError as exc:
            raise SendError("UNKNOWN_TOPIC", str(exc)) from exc

    def _store_payloads(
        self, topic: str, partition: int, payloads: list[bytes]
    ) -> SendError | None:
        return self._append(self.registry.queue(topic, partition), payloads)

    def _append(self, queue: PartitionQueue, payloads: list[bytes]) -> SendError | None:
        try:
            queue.append(payloads)
        except QueueFullError as exc:
            return SendError("QUEUE_FULL", str(exc))
        except RingClosed:
            return SendError("AGENT_STOPPED", "the agent is stopping")
        return None

    def _store_or_raise(self, topic: str, partition: int, payloads: list[bytes]) -> None:
        self.registry.queue(topic, partition).append(payloads)

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
        return self._disk_queue(path, topic, partition, durability)

    def _make_pending_queue(self, path: Path, topic: str) -> DiskQueue:
        """A pending queue keeps the `events` promise for `events` topics, `logs` for others."""
        events = self.config.durability(topic) is Durability.EVENTS
        return self._disk_queue(path, topic, -1, Durability.EVENTS if events else Durability.LOGS)

    def _disk_queue(
        self, path: Path, topic: str, partition: int, durability: Durability
    ) -> DiskQueue:
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
        identity = transactions = None
        if isinstance(queue, DiskQueue):  # positions survive restarts: they name the events
            identity = self.identity.encode()
            transactions = self._transactions(queue)
        sender = Sender(queue, self._link, clock=self._clock, rehome=self._rehome,
                        identity=identity, transactions=transactions)  # fmt: skip
        self._senders[(queue.topic, queue.partition)] = sender
        sender.start()

    def _transactions(self, queue: DiskQueue) -> RingTransactions | None:
        if self.config.delivery_guarantee is not DeliveryGuarantee.EXACTLY_ONCE:
            return None
        return RingTransactions(
            bootstrap=self.config.bootstrap_server,
            settings=self.config.producer,
            agent=self.identity,
            topic=queue.topic,
            partition=queue.partition,
            intent_path=queue.ring.path.with_suffix(INTENT_SUFFIX),
        )

    def _rehome(self, queue: PartitionQueue, payloads: list[bytes], reason: str) -> bool:
        """A batch refused because its topic or partition does not exist: dead-lettered when
        the topic is gone, placed again by key when the topic now has fewer partitions; False
        (retry as usual) when the cluster cannot say or the partition exists."""
        topic = queue.topic
        try:
            count = self._link.partition_count(topic, METADATA_WAIT_S)
        except MetadataUnavailable:
            return False
        except UnknownTopicError as exc:
            return self._dead_letter(topic, payloads, str(exc))
        if queue.partition < count:
            return False
        self.registry.replace_count(topic, count)
        try:
            self.pending.place(topic, payloads, count)
        except (QueueFullError, RingClosed):
            return False
        return True

    def _dead_letter(self, topic: str, payloads: list[bytes], reason: str) -> bool:
        try:
            self.pending.dead_letters.add(topic, payloads, reason)
        except OSError as exc:  # a full or failing disk: the batch stays queued
            log.warning("%s: dead letters not written: %s", topic, exc)
            return False
        log.warning("%s: %d events dead-lettered: %s", topic, len(payloads), reason)
        return True

    def _housekeeping(self) -> None:
        interval_s = self.config.flush_interval_ms / 1000
        last_refresh = self._clock.monotonic_ms()
        self._link.probe()
        while not self._stopping.wait(interval_s):
            for queue in self.registry.queues():
                if queue.durability is not Durability.EVENTS:
                    queue.flush()
            self.pending.flush()
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
        self.pending.flush()

    def status(self) -> dict[str, Any]:
        queues = self.queue_statuses()
        tailed = self.tailer.positions() if self.tailer else []
        return {
            "cluster_reachable": self._link.reachable,
            "last_error": self._link.last_error,
            "bootstrap_server": self.config.bootstrap_server,
            "security": self.config.security(),
            "queues": [asdict(q) for q in queues],
            "pending": self.pending.statuses(),
            "dead_letters": [asdict(d) for d in self.pending.dead_letters.statuses()],
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
            queues_empty = all(q.state().depth == 0 for q in self.registry.queues())
            if queues_empty and self.pending.depth() == 0:
                return True
            self._stopping.wait(0.05)
        return False

    def close(self, timeout_s: float | None = None) -> None:
        """Stop within `timeout_s` (default: `shutdown_timeout_ms`) and keep the rest for later.

        New events are refused from the start; the tailer, the pending router and the
        housekeeping thread stop; a batch being delivered gets what is left of the time to be
        acknowledged; then every queue is flushed and closed. Events not yet delivered stay in
        the queues and are sent after the next start.
        """
        if timeout_s is None:
            timeout_s = self.config.shutdown_timeout_ms / 1000
        deadline = time.monotonic() + timeout_s
        self._closed = True
        if self.metrics_server is not None:
            self.metrics_server.shutdown()
            self.metrics_server.server_close()
        if self.tailer is not None:
            self.tailer.stop()
        self._stopping.set()
        senders = list(self._senders.values())
        for sender in senders:
            sender.request_stop(grace_s=_share_of(deadline, 0.5))
        self.pending.stop(_share_of(deadline, 0.2))
        self._background.join(_share_of(deadline, 0.1))
        for sender in senders:
            sender.join(max(0.0, deadline - time.monotonic() - CLOSE_RESERVE_S))
        for queue in self.registry.queues():
            queue.close()
        self._link.close(max(0.0, deadline - time.monotonic()))


CLOSE_RESERVE_S = 0.5  # of the shutdown time, kept for closing the queues and the producer


def _share_of(deadline: float, fraction: float) -> float:
    """`fraction` of the time left before `deadline`, in seconds."""
    return max(0.0, (deadline - time.monotonic()) * fraction)


_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]{1,249}")


@functools.lru_cache(maxsize=4096)
def _valid_topic(topic: str) -> bool:
    """Kafka's rule for topic names (they also name directories in the spool)."""
    return _TOPIC_NAME.fullmatch(topic) is not None and topic not in (".", "..")
