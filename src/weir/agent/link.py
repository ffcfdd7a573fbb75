"""The agent's only door to the cluster: one idempotent confluent-kafka producer (acks=all).

librdkafka keeps a connection per broker and routes each partition to its leader, following
leader changes; `KafkaLink` adds what the senders need on top: a blocking `deliver` that returns
only when every record of a batch was acknowledged (or says why not), metadata look-ups that
separate "no such topic" from "cluster unreachable", and a producer replaced after a fatal error.
`reachable` turns false as soon as librdkafka reports every broker down (or a metadata request or
delivery fails for want of a connection) and true again on the next answer from the cluster;
`known_down` is the same but false until the cluster was first asked.
Third-party exceptions are translated here, once.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from weir.agent.event import Fields
from weir.agent.registry import MetadataUnavailable, UnknownTopicError
from weir.protocol.client_settings import client_settings

log = logging.getLogger(__name__)

METADATA_TIMEOUT_S = 5.0
ABANDON_GRACE_S = 5.0
_LEADER_WAIT_S = 0.2


class DeliveryFailed(Exception):
    """Some record of a batch was not acknowledged; the whole batch must be sent again, unless
    `placement` says the cluster answered that its topic or partition does not exist."""

    def __init__(self, message: str, *, placement: bool = False) -> None:
        super().__init__(message)
        self.placement = placement


_PLACEMENT_ERRORS = frozenset(
    {KafkaError._UNKNOWN_TOPIC, KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_PARTITION}
)


@dataclass
class Abandon:
    """Set when the agent stops: acknowledgements in flight then get `grace_s` more to arrive."""

    requested: threading.Event = field(default_factory=threading.Event)
    grace_s: float = ABANDON_GRACE_S


@dataclass
class _Pending:
    remaining: int
    done: threading.Event
    error: KafkaError | None = None

    def delivered(self, err: KafkaError | None, _msg: Any) -> None:
        if err is not None and self.error is None:
            self.error = err
        self.remaining -= 1
        if self.remaining == 0:
            self.done.set()


def _refused(error: KafkaError) -> DeliveryFailed:
    placement = error.code() in _PLACEMENT_ERRORS
    return DeliveryFailed(error.str(), placement=placement)


class KafkaLink:
    """One producer shared by all senders, polled by its own thread."""

    def __init__(self, bootstrap: str, settings: dict[str, Any] | None = None) -> None:
        self._config: dict[str, Any] = {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
            "compression.type": "lz4",
            "message.timeout.ms": 30_000,
            "allow.auto.create.topics": True,
            "queue.buffering.max.messages": 1_000_000,
            "error_cb": self._on_error,
        }
        self._config.update(client_settings(settings or {}))
        self._lock = threading.Lock()
        self._producer = Producer(self._config)
        self._closed = threading.Event()
        self._answered: bool | None = None  # None until the cluster was first asked
        self._poller = threading.Thread(target=self._poll_loop, name="weir-agent-poll", daemon=True)
        self._poller.start()

    @property
    def reachable(self) -> bool:
        """True while the cluster answers."""
        return self._answered is True

    @reachable.setter
    def reachable(self, answered: bool) -> None:
        self._answered = answered

    @property
    def known_down(self) -> bool:
        """True once the cluster failed to answer and until it answers again (false at start)."""
        return self._answered is False

    def deliver(
        self,
        topic: str,
        records: list[Fields],
        partition: int,
        timeout_s: float,
        abandon: Abandon | None = None,
    ) -> None:
        """Produce `records` (decoded stored events) to one partition and wait for every
        acknowledgement.

        Once `abandon` is requested (the agent is stopping), acknowledgements still in flight
        get its `grace_s` to arrive; after that the wait ends with `DeliveryFailed`.
        """
        pending = _Pending(remaining=len(records), done=threading.Event())
        producer = self._producer
        produce, delivered = producer.produce, pending.delivered
        for timestamp, key, value, headers in records:
            try:
                produce(topic, value=value, key=key, partition=partition,
                        timestamp=timestamp, on_delivery=delivered,
                        headers=list(headers) if headers else None)  # fmt: skip
            except BufferError:
                self._produce_when_room(producer, topic, (timestamp, key, value, headers),
                                        partition, pending)  # fmt: skip
            except KafkaException as exc:
                raise _refused(exc.args[0]) from exc
        deadline = time.monotonic() + timeout_s
        while not pending.done.wait(0.1):
            if abandon is not None and abandon.requested.is_set():
                deadline = min(deadline, time.monotonic() + abandon.grace_s)
                abandon = None
            if time.monotonic() > deadline:
                raise DeliveryFailed(f"no acknowledgement within {timeout_s:.0f}s")
        if pending.error is not None:
            self._check_fatal(producer, pending.error)
            raise _refused(pending.error)
        self.reachable = True

    def _produce_when_room(
        self, producer: Producer, topic: str, record: Fields, partition: int, pending: _Pending
    ) -> None:
        """Produce once librdkafka's local queue has room again."""
        timestamp, key, value, headers = record
        while True:
            time.sleep(0.01)
            try:
                producer.produce(topic, value=value, key=key, partition=partition,
                                 timestamp=timestamp, headers=list(headers) if headers else None,
                                 on_delivery=pending.delivered)  # fmt: skip
                return
            except BufferError:
                continue

    def partition_count(self, topic: str, wait_s: float = METADATA_TIMEOUT_S) -> int:
        """The topic's partition count, asking for at most `wait_s`; may create the topic if
        the cluster auto-creates (its leaders may take a few rounds to be elected)."""
        deadline = time.monotonic() + wait_s
        while True:
            remaining = deadline - time.monotonic()
            metadata = self._metadata(topic, max(remaining, 0.05))
            described = metadata.topics.get(topic)
            error = described.error if described is not None else None
            if error is None and described is not None and described.partitions:
                return len(described.partitions)
            if error is not None and error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                raise UnknownTopicError(f"topic {topic!r} does not exist")
            if time.monotonic() + _LEADER_WAIT_S > deadline:
                raise MetadataUnavailable(f"no partitions known for topic {topic!r}")
            time.sleep(_LEADER_WAIT_S)

    def _metadata(self, topic: str, timeout_s: float) -> Any:
        try:
            metadata = self._producer.list_topics(topic, timeout=min(timeout_s, METADATA_TIMEOUT_S))
        except KafkaException as exc:
            self.reachable = False
            raise MetadataUnavailable(f"cluster unreachable: {exc.args[0]}") from exc
        self.reachable = True
        return metadata

    def probe(self) -> bool:
        try:
            self._producer.list_topics(timeout=METADATA_TIMEOUT_S)
            self.reachable = True
        except KafkaException:
            self.reachable = False
        return self.reachable

    def _on_error(self, error: KafkaError) -> None:
        if error.code() == KafkaError._ALL_BROKERS_DOWN:
            self.reachable = False

    def _check_fatal(self, producer: Producer, error: KafkaError) -> None:
        self.reachable = error.code() not in (KafkaError._MSG_TIMED_OUT, KafkaError._TRANSPORT)
        if error.fatal():
            with self._lock:
                if self._producer is producer:
                    log.warning("fatal producer error %s; starting a new producer", error.str())
                    self._producer = Producer(self._config)

    def _poll_loop(self) -> None:
        while not self._closed.is_set():
            self._producer.poll(0.05)

    def close(self, timeout_s: float = 1.0) -> None:
        """Stop; records not yet acknowledged stay in the queues and are sent after a restart."""
        self._closed.set()
        self._poller.join(timeout_s)
        self._producer.purge()
        self._producer.flush(min(timeout_s, 1.0))
