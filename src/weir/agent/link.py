"""The agent's only door to the cluster: one idempotent confluent-kafka producer (acks=all).

librdkafka keeps a connection per broker and routes each partition to its leader, following
leader changes; `KafkaLink` adds what the senders need on top: a blocking `deliver` that returns
only when every record of a batch was acknowledged (or says why not), metadata look-ups that
separate "no such topic" from "cluster unreachable", and a producer replaced after a fatal error.
`reachable` turns false as soon as librdkafka reports every broker down (or a metadata request or
delivery fails for want of a connection) and true again on the next answer from the cluster;
`known_down` is the same but false until the cluster was first asked.
`last_error` names the cluster's refusal of the agent's credentials or ACLs (Kafka's error name
and librdkafka's reason), logged once when it starts and once when it ends; the agent keeps
retrying meanwhile, since the operator may fix the credentials or ACLs on the cluster.
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
from weir.protocol.errors import client_error_name

log = logging.getLogger(__name__)
#: librdkafka's own log lines
LIBRDKAFKA_LOG = logging.getLogger("weir.agent.librdkafka")

METADATA_TIMEOUT_S = 5.0
ABANDON_GRACE_S = 5.0
#: the pause before a producer replaced after a fatal error may be refused in turn
FATAL_RETRY_S = 1.0
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

#: the cluster refused the agent's credentials (or its TLS handshake)
_AUTHENTICATION_ERRORS = frozenset(
    {KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED, KafkaError._SSL}
)
#: the cluster's ACLs refuse the agent
_AUTHORIZATION_ERRORS = frozenset({
    KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.CLUSTER_AUTHORIZATION_FAILED,
    KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
})  # fmt: skip


class _QuietWhileRefused(logging.Filter):
    """Drops librdkafka's log lines while the cluster refuses a link: it would repeat the
    refusal on every reconnection, and the link has reported it once."""

    def __init__(self) -> None:
        super().__init__()
        self.refused: set[int] = set()  # id() of the links refused now

    def filter(self, record: logging.LogRecord) -> bool:
        return not self.refused


_QUIET = _QuietWhileRefused()
LIBRDKAFKA_LOG.addFilter(_QUIET)


def describe(error: KafkaError) -> str:
    """`NAME: reason` with Kafka's error name, e.g. `TOPIC_AUTHORIZATION_FAILED: Broker: ...`."""
    return f"{client_error_name(error.code(), error.name())}: {error.str()}"


def _fatal_error(exc: BaseException) -> KafkaError | None:
    cause = exc.__cause__ if isinstance(exc, SystemError) else exc
    error = cause.args[0] if isinstance(cause, KafkaException) and cause.args else None
    return error if isinstance(error, KafkaError) else None


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
    return DeliveryFailed(describe(error), placement=placement)


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
            "logger": LIBRDKAFKA_LOG,
        }
        self._config.update(client_settings(settings or {}))
        self._lock = threading.Lock()
        self._producer = Producer(self._config)
        self._closed = threading.Event()
        self._answered: bool | None = None  # None until the cluster was first asked
        self._refusal: KafkaError | None = None  # the cluster's refusal, until it accepts
        self._reported: set[int] = set()  # the refusals logged since it last accepted
        self._poller = threading.Thread(target=self._poll_loop, name="weir-agent-poll", daemon=True)
        self._poller.start()

    @property
    def reachable(self) -> bool:
        """True while the cluster answers."""
        return self._answered is True

    @reachable.setter
    def reachable(self, answered: bool) -> None:
        self._answered = answered
        refusal = self._refusal
        if answered and refusal is not None and refusal.code() in _AUTHENTICATION_ERRORS:
            self._accepted()  # an answer needs the credentials (not the ACLs) accepted

    @property
    def last_error(self) -> str | None:
        """The cluster's refusal of the agent's credentials or ACLs, until it accepts them."""
        refusal = self._refusal
        return describe(refusal) if refusal is not None else None

    def _refused_by_cluster(self, error: KafkaError) -> None:
        """Note a refusal; each kind logged once until the cluster accepts, not on every retry."""
        self._refusal = error
        _QUIET.refused.add(id(self))
        if error.code() not in self._reported:
            self._reported.add(error.code())
            log.error("the cluster refuses the agent: %s; events stay queued and are retried",
                      describe(error))  # fmt: skip

    def _accepted(self) -> None:
        if self._refusal is not None:
            self._refusal = None
            self._reported.clear()
            _QUIET.refused.discard(id(self))
            log.warning("the cluster accepts the agent again; sending the queued events")

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
            if self._producer is not producer:  # replaced after a fatal error: send again
                raise DeliveryFailed("the producer stopped on a fatal error")
        if pending.error is not None:
            self._check_fatal(producer, pending.error)
            self._note(pending.error)
            raise _refused(pending.error)
        self.reachable = True
        self._accepted()

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
            if error is not None and error.code() in _AUTHORIZATION_ERRORS:
                self._refused_by_cluster(error)
                raise MetadataUnavailable(describe(error))
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
        self._note(error)

    def _note(self, error: KafkaError) -> None:
        if error.code() in _AUTHENTICATION_ERRORS or error.code() in _AUTHORIZATION_ERRORS:
            self._refused_by_cluster(error)

    def _check_fatal(self, producer: Producer, error: KafkaError) -> None:
        self.reachable = error.code() not in (KafkaError._MSG_TIMED_OUT, KafkaError._TRANSPORT)
        if error.fatal():
            with self._lock:
                if self._producer is producer:
                    # a refusal the link reports already (once) is not worth a line per retry
                    level = logging.DEBUG if self._refusal is error else logging.WARNING
                    log.log(level, "fatal producer error %s; starting a new producer",
                            error.str())  # fmt: skip
                    self._producer = Producer(self._config)

    def _poll_loop(self) -> None:
        while not self._closed.is_set():
            producer = self._producer
            try:
                producer.poll(0.05)
            except (KafkaException, SystemError) as exc:
                # a fatal error (an idempotent producer refused by the cluster) is raised by
                # poll, as a SystemError when a callback was being served: a new producer
                error = _fatal_error(exc)
                if error is None:
                    raise
                self._note(error)
                self._check_fatal(producer, error)
                self._closed.wait(FATAL_RETRY_S)  # the cluster may refuse the next one too

    def close(self, timeout_s: float = 1.0) -> None:
        """Stop; records not yet acknowledged stay in the queues and are sent after a restart."""
        self._closed.set()
        _QUIET.refused.discard(id(self))
        self._poller.join(timeout_s)
        self._producer.purge()
        self._producer.flush(min(timeout_s, 1.0))
