"""Exactly-once delivery of one queue across the agent's restarts (`delivery_guarantee =
"exactly-once"`): each delivered batch is a Kafka transaction, and a restarted agent learns from
the topic itself which of its batches were committed.

What a record carries: the headers `weir.agent` (the agent's identity, a random id kept in the
spool, `AgentIdentity`) and `weir.pos` (the event's sequence in its queue's ring, decimal). The
pair names an event for good: a consumer can deduplicate on it whatever wrote the topic twice.

How a batch is delivered (`RingTransactions.deliver`):

1. `prepare`: `begin_transaction`, produce the batch, wait for every acknowledgement (its offsets
   are then known), and write the *intent* beside the ring (`<partition>.txn`: the batch's first
   and last offset and its first and end position, see `Intent`);
2. `commit`: `commit_transaction`; only then does the sender acknowledge the batch in the ring.

How a queue resumes (`RingTransactions.resume`, on start and after any failed delivery): a new
producer with the queue's transactional id (`weir-agent.<agent id>.<topic>.<partition>`) calls
`init_transactions`, which fences every earlier producer of the id and aborts its open
transaction (or completes one whose commit had begun), so a batch in flight when the agent was
killed can never land later. Then, if the intent covers positions the ring still holds, the
partition is read read_committed from the intent's first offset until the last stable offset
passes its last one: finding the batch's records means it was committed, and the ring skips up
to the intent's end position (`skip_to`); finding none means it was aborted, and it is sent again.

Why a transactional id per queue rather than one idempotent producer resumed with a persisted
producer id, epoch and sequences: librdkafka cannot be given a producer id or sequences, and
Kafka expires idempotent producer state on its own schedule; a transactional id is the protocol's
own way to say "I am the same producer", with fencing the broker enforces. Why per queue rather
than per agent: librdkafka allows one transactional producer per transactional id, and a
transaction per sender keeps the senders independent (one partition's failure aborts no other's);
the price is one producer (and its connections) per exactly-once queue.

Why an intent file rather than scanning the partition's tail for the agent's highest position:
other agents write the same partitions, so the records since this agent's last commit can be
many; the intent bounds the read to one batch. It is written without fsync, like the ring's read
position: both survive kill -9 through the page cache; after a power loss the ring may resend
batches it had delivered (at-least-once there).

Owner: the queue's sender thread (docs/threads.md); nothing here is shared with other threads.
Third-party exceptions are translated here into `DeliveryFailed`, once.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import struct
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import crc32c
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from weir.agent.event import Fields
from weir.agent.link import (
    LIBRDKAFKA_LOG,
    METADATA_TIMEOUT_S,
    Abandon,
    DeliveryFailed,
    describe,
)
from weir.agent.queue import PartitionQueue
from weir.agent.ring import RecordBatchView
from weir.durable import write_bytes_atomically
from weir.protocol.client_settings import client_settings, is_security_setting
from weir.protocol.event_headers import AGENT_HEADER, POSITION_HEADER

log = logging.getLogger(__name__)

IDENTITY_FILE = "agent.id"
INTENT_SUFFIX = ".txn"
#: how long a resume waits for the partition's last stable offset to pass the intent's batch
RESUME_TIMEOUT_S = 30.0
#: how long the cluster lets a transaction of a vanished agent hold the partition's last stable
#: offset back before aborting it (a restarted agent aborts it at once)
TRANSACTION_TIMEOUT_MS = 30_000
ABORT_TIMEOUT_S = 2.0


class AgentIdentity:
    """The agent's identity: a random id made at the first start and kept in the spool, so the
    agent restarted on the same spool is the same agent (and a new spool is a new agent)."""

    @staticmethod
    def load_or_create(spool: Path) -> str:
        path = spool / IDENTITY_FILE
        if path.exists():
            return path.read_text().strip()
        spool.mkdir(parents=True, exist_ok=True)
        identity = secrets.token_hex(8)
        write_bytes_atomically(path, identity.encode() + b"\n")
        return identity


def with_position(records: list[Fields], agent: bytes, first_position: int) -> list[Fields]:
    """The records with the agent's identity and each one's ring position as headers."""
    return [
        (stamp, key, value, [*headers, (AGENT_HEADER, agent),
                             (POSITION_HEADER, str(first_position + index).encode())])
        for index, (stamp, key, value, headers) in enumerate(records)
    ]  # fmt: skip


def position_of(headers: Any, agent: bytes) -> int | None:
    """The ring position a record carries if `agent` wrote it, else None (`headers`: a consumed
    message's, a list of name and value pairs or None)."""
    identity = position = None
    for name, value in headers or ():
        if name == AGENT_HEADER:
            identity = value
        elif name == POSITION_HEADER and value is not None:
            position = value
    if identity != agent or position is None:
        return None
    return int(position)


_INTENT = struct.Struct(">qqQQ")
_CRC = struct.Struct(">I")


@dataclass(frozen=True, slots=True, kw_only=True)
class Intent:
    """The batch whose commit was about to begin: offsets [first_offset, last_offset] of its
    partition, ring positions [first_position, end_position).

    On disk: first_offset i64 | last_offset i64 | first_position u64 | end_position u64 | crc32c.
    """

    first_offset: int
    last_offset: int
    first_position: int
    end_position: int

    def encode(self) -> bytes:
        body = _INTENT.pack(
            self.first_offset, self.last_offset, self.first_position, self.end_position
        )
        return body + _CRC.pack(crc32c.crc32c(body))

    @classmethod
    def decode(cls, data: bytes) -> Intent | None:
        """The intent, or None if `data` is not a whole one (a torn or foreign file)."""
        if len(data) != _INTENT.size + _CRC.size:
            return None
        body, (checksum,) = data[: _INTENT.size], _CRC.unpack(data[_INTENT.size :])
        if crc32c.crc32c(body) != checksum:
            return None
        first_offset, last_offset, first_position, end_position = _INTENT.unpack(body)
        return cls(first_offset=first_offset, last_offset=last_offset,
                   first_position=first_position, end_position=end_position)  # fmt: skip


def read_intent(path: Path) -> Intent | None:
    try:
        return Intent.decode(path.read_bytes())
    except FileNotFoundError:
        return None


def write_intent(path: Path, intent: Intent) -> None:
    """No fsync: the intent, like the ring's read position, must survive kill -9, not power loss."""
    write_bytes_atomically(path, intent.encode(), sync=False)


def needs_check(intent: Intent | None, read_sequence: int) -> bool:
    """True if the intent's batch is still (partly) in the ring: it may have been committed."""
    return intent is not None and intent.end_position > read_sequence


def skip_to(intent: Intent | None, read_sequence: int, committed: Iterable[int]) -> int:
    """The ring position to resume sending from: past the intent's batch if any of its positions
    is among `committed` (the positions of the agent's records read read_committed from the
    intent's first offset; a transaction lands whole or not at all), else `read_sequence`."""
    if intent is None or not needs_check(intent, read_sequence):
        return read_sequence
    batch = range(intent.first_position, intent.end_position)
    if any(position in batch for position in committed):
        return max(read_sequence, intent.end_position)
    return read_sequence


def skip_delivered(queue: PartitionQueue, position: int, max_bytes: int) -> int:
    """Acknowledge the queue's events before ring position `position` (a predecessor delivered
    them); returns how many were skipped."""
    skipped = 0
    while (read_sequence := queue.state().read_sequence) < position:
        view = queue.peek(position - read_sequence, max_bytes)
        if not view.payloads:
            break
        queue.acknowledge(view)
        skipped += len(view.payloads)
    return skipped


class ResumeFailed(DeliveryFailed):
    """The queue could not learn whether its last batch was committed; try again later."""


class RingTransactions:
    """One queue's transactional producer: delivers each batch in a transaction and, after a
    start or a failure, fences its predecessors and finds where the ring resumes."""

    def __init__(
        self,
        *,
        bootstrap: str,
        settings: dict[str, Any] | None,
        agent: str,
        topic: str,
        partition: int,
        intent_path: Path,
    ) -> None:
        self.topic, self.partition = topic, partition
        self._agent = agent.encode()
        self._intent_path = intent_path
        self.transactional_id = f"weir-agent.{agent}.{topic}.{partition}"
        base: dict[str, Any] = {"bootstrap.servers": bootstrap, "logger": LIBRDKAFKA_LOG}
        base.update(client_settings(settings or {}))
        security = {k: v for k, v in base.items() if is_security_setting(k)}
        self._consumer_config = {
            "bootstrap.servers": bootstrap,
            "logger": LIBRDKAFKA_LOG,
            **security,
            # librdkafka wants one; the reader only assigns, never joins or commits
            "group.id": self.transactional_id,
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
        }
        self._producer_config = {
            **base,
            "transactional.id": self.transactional_id,
            "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS,
            "acks": "all",
            "compression.type": "lz4",
            "queue.buffering.max.messages": 1_000_000,
        }
        self._producer: Producer | None = None

    @property
    def ready(self) -> bool:
        """False until `resume` succeeded, and again after a failed delivery."""
        return self._producer is not None

    # -- resuming ---------------------------------------------------------------------------

    def resume(self, read_sequence: int, timeout_s: float = RESUME_TIMEOUT_S) -> int:
        """Fence earlier producers of the queue's transactional id; returns the ring position to
        send from (past a batch that was committed but not acknowledged in the ring)."""
        self._discard_producer()
        producer = Producer(self._producer_config)
        try:
            producer.init_transactions(timeout_s)
        except KafkaException as exc:
            raise ResumeFailed(f"init_transactions: {describe(exc.args[0])}") from exc
        intent = read_intent(self._intent_path)
        position = read_sequence
        if intent is not None and needs_check(intent, read_sequence):
            committed = self._committed_positions(intent, timeout_s)
            position = skip_to(intent, read_sequence, committed)
            verdict = "committed: skipped" if position > read_sequence else "aborted: sent again"
            log.warning("%s-%d: the batch at positions %d-%d in flight before the resume was %s",
                        self.topic, self.partition, intent.first_position,
                        intent.end_position - 1, verdict)  # fmt: skip
        self._producer = producer
        return position

    def _committed_positions(self, intent: Intent, timeout_s: float) -> list[int]:
        consumer = Consumer(self._consumer_config)
        try:
            tp = TopicPartition(self.topic, self.partition, intent.first_offset)
            consumer.assign([tp])
            return list(self._read_batch(consumer, intent, time.monotonic() + timeout_s))
        finally:
            consumer.close()

    def _read_batch(self, consumer: Consumer, intent: Intent, deadline: float) -> Iterator[int]:
        """The agent's positions among the committed records of [first_offset, last_offset];
        ends once the partition's last stable offset (librdkafka's high offset read_committed)
        is past `last_offset`, so an aborted batch is told from one not yet decided (an open
        transaction of another producer holds the last stable offset back)."""
        while time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is None:
                continue
            error = message.error()
            if error is not None and error.code() != KafkaError._PARTITION_EOF:
                raise ResumeFailed(f"reading back the last batch: {describe(error)}")
            if error is None:
                offset = message.offset()
                if offset is not None and offset > intent.last_offset:
                    return
                position = position_of(message.headers(), self._agent)
                if position is not None:
                    yield position
                    if position == intent.end_position - 1:
                        return
                continue
            if self._last_stable_offset(consumer) > intent.last_offset:
                return
        raise ResumeFailed("the last batch's transaction was not decided in time")

    def _last_stable_offset(self, consumer: Consumer) -> int:
        """Asked of the leader: a read_committed consumer's ListOffsets answers the last stable
        offset (its cached high offset is the high watermark). A leader new enough not to know
        its high watermark yet (OFFSET_NOT_AVAILABLE) counts as "not decided yet": -1."""
        tp = TopicPartition(self.topic, self.partition)
        try:
            _, stable = consumer.get_watermark_offsets(tp, timeout=METADATA_TIMEOUT_S, cached=False)
        except KafkaException as exc:
            if exc.args[0].code() == KafkaError.OFFSET_NOT_AVAILABLE:
                return -1
            raise ResumeFailed(f"last stable offset: {describe(exc.args[0])}") from exc
        return int(stable)

    # -- delivering -------------------------------------------------------------------------

    def deliver(
        self,
        batch: RecordBatchView,
        records: list[Fields],
        timeout_s: float,
        abandon: Abandon | None = None,
    ) -> None:
        """Deliver `records` (the batch, decoded and with position headers) in one transaction;
        returns once it is committed. Any failure raises `DeliveryFailed` and leaves the queue to
        `resume` again (its outcome may be unknown: the next resume finds it out)."""
        self.prepare(batch, records, timeout_s, abandon)
        self.commit(timeout_s)

    def prepare(
        self,
        batch: RecordBatchView,
        records: list[Fields],
        timeout_s: float,
        abandon: Abandon | None = None,
    ) -> None:
        """The first phase: begin a transaction, produce the batch, wait for every
        acknowledgement and write the intent."""
        producer = self._producer
        if producer is None:
            raise DeliveryFailed("not resumed")
        with self._failures():
            first, last = self._produce_batch(producer, records, timeout_s, abandon)
            write_intent(self._intent_path, Intent(
                first_offset=first, last_offset=last,
                first_position=batch.first_sequence, end_position=batch.end_sequence,
            ))  # fmt: skip

    def commit(self, timeout_s: float) -> None:
        """The second phase: commit the prepared transaction."""
        producer = self._producer
        if producer is None:
            raise DeliveryFailed("not resumed")
        with self._failures():
            producer.commit_transaction(timeout_s)

    @contextlib.contextmanager
    def _failures(self) -> Iterator[None]:
        """Any failure drops the producer (the next `resume` fences it and finds out what
        landed) and is raised as `DeliveryFailed`."""
        try:
            yield
        except KafkaException as exc:
            self._discard_producer()
            error = exc.args[0]
            raise DeliveryFailed(describe(error), placement=_placement(error)) from exc
        except DeliveryFailed:
            self._discard_producer()
            raise

    def _produce_batch(
        self, producer: Producer, records: list[Fields], timeout_s: float, abandon: Abandon | None
    ) -> tuple[int, int]:
        """Begin a transaction and produce `records`; their first and last offset once all are
        acknowledged."""
        producer.begin_transaction()
        pending = _Acknowledgements(len(records))
        for timestamp, key, value, headers in records:
            while True:
                try:
                    producer.produce(self.topic, value=value, key=key, partition=self.partition,
                                     timestamp=timestamp, headers=list(headers),
                                     on_delivery=pending.delivered)  # fmt: skip
                    break
                except BufferError:
                    producer.poll(0.01)
        deadline = time.monotonic() + timeout_s
        while not pending.done.is_set():
            producer.flush(0.05)  # sends at once (the batch is whole: no linger) and serves acks
            if abandon is not None and abandon.requested.is_set():
                deadline = min(deadline, time.monotonic() + abandon.grace_s)
                abandon = None
            if time.monotonic() > deadline:
                raise DeliveryFailed(f"no acknowledgement within {timeout_s:.0f}s")
        if pending.error is not None:
            raise DeliveryFailed(describe(pending.error), placement=_placement(pending.error))
        return pending.first, pending.last

    def _discard_producer(self) -> None:
        """Drop the producer, aborting its open transaction if it still can: until aborted, the
        transaction holds back the partition's last stable offset (read_committed consumers
        wait), for at most `TRANSACTION_TIMEOUT_MS` if the agent does not come back."""
        producer, self._producer = self._producer, None
        if producer is None:
            return
        producer.purge()
        with contextlib.suppress(KafkaException):
            producer.abort_transaction(ABORT_TIMEOUT_S)

    def close(self) -> None:
        """Drop the producer; an open transaction is aborted by the next start's fencing."""
        self._discard_producer()


_PLACEMENT_ERRORS = frozenset(
    {KafkaError._UNKNOWN_TOPIC, KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_PARTITION}
)


def _placement(error: KafkaError) -> bool:
    return error.code() in _PLACEMENT_ERRORS


class _Acknowledgements:
    """Counts a batch's delivery reports and keeps its lowest and highest offset."""

    def __init__(self, remaining: int) -> None:
        self.remaining = remaining
        self.done = threading.Event()
        self.error: KafkaError | None = None
        self.first = 1 << 62
        self.last = -1
        if remaining == 0:
            self.done.set()

    def delivered(self, err: KafkaError | None, message: Any) -> None:
        if err is not None:
            self.error = self.error or err
        else:
            offset = message.offset()
            self.first, self.last = min(self.first, offset), max(self.last, offset)
        self.remaining -= 1
        if self.remaining == 0:
            self.done.set()
