"""Committing what finished: to Kafka (at-least-once), into a transactional sink
(exactly-once), or as a Kafka transaction that writes the results to an output topic together
with the input offsets (exactly-once from topic to topic, KIP-98/KIP-447).

Owns the `Committer` interface and its three implementations. A committer is asked for where
newly assigned partitions start, and to commit a set of owned partitions up to their
contiguous finished prefix (`OwnedPartition.commit_target`); `commit` returns the partitions
another owner fenced off. Both run on the fetcher thread that owns the partitions.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from typing import Any, Protocol

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition

from weir.consumer.metrics import FetcherStats
from weir.consumer.partition import OwnedPartition
from weir.consumer.sink import OffsetAdvance, SinkFencedError, TopicPartition, TransactionalSink

log = logging.getLogger(__name__)

COMMITTED_TIMEOUT_S = 30.0
TRANSACTION_TIMEOUT_S = 60.0
#: errors of a transactional offset commit that mean this member no longer owns its partitions
_LOST_OWNERSHIP = frozenset({
    KafkaError.ILLEGAL_GENERATION,
    KafkaError.UNKNOWN_MEMBER_ID,
    KafkaError.FENCED_INSTANCE_ID,
    KafkaError.REBALANCE_IN_PROGRESS,
})
NO_OFFSET = -1001  # librdkafka's OFFSET_INVALID: nothing committed


class Committer(Protocol):
    def starting_offsets(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        """Committed offsets of newly assigned partitions (absent: none committed)."""
        ...

    def commit(self, owned: Sequence[OwnedPartition]) -> list[OwnedPartition]:
        """Commit each partition's finished prefix; return the fenced partitions."""
        ...

    def close(self) -> None: ...


def _targets(owned: Sequence[OwnedPartition]) -> list[tuple[OwnedPartition, int]]:
    return [(p, target) for p in owned if (target := p.commit_target()) is not None]


class KafkaCommitter:
    """At-least-once: offsets go to the group coordinator after the handlers finished."""

    def __init__(self, consumer: Consumer, stats: FetcherStats) -> None:
        self._consumer = consumer
        self._stats = stats

    def starting_offsets(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        asked = [KafkaTopicPartition(t, p) for t, p in partitions]
        try:
            answer = self._consumer.committed(asked, timeout=COMMITTED_TIMEOUT_S)
        except KafkaException as exc:
            log.warning("cannot read committed offsets: %s", exc)
            return {}
        return {(tp.topic, tp.partition): tp.offset for tp in answer if tp.offset >= 0}

    def commit(self, owned: Sequence[OwnedPartition]) -> list[OwnedPartition]:
        targets = _targets(owned)
        if targets:
            self._commit(targets)
        return []

    def _commit(self, targets: list[tuple[OwnedPartition, int]]) -> None:
        offsets = [KafkaTopicPartition(p.topic, p.partition, t) for p, t in targets]
        try:
            answer = self._consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as exc:
            self._stats.commit_failures += 1
            log.warning("offset commit failed: %s", exc.args[0] if exc.args else exc)
            return
        refused = {(tp.topic, tp.partition) for tp in answer or () if tp.error is not None}
        for partition, target in targets:
            if partition.key not in refused:
                partition.committed_to(target)
        self._stats.commits += 1
        self._stats.commit_failures += bool(refused)

    def close(self) -> None:
        pass


class SinkCommitter:
    """Exactly-once: results and offsets are committed in one sink transaction; Kafka is told
    afterwards (asynchronously, for lag tools only: the sink's offsets are the ones used)."""

    def __init__(
        self, sink: TransactionalSink, group: str, consumer: Consumer, stats: FetcherStats
    ) -> None:
        self._sink = sink
        self._group = group
        self._consumer = consumer
        self._stats = stats

    def starting_offsets(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        return self._sink.read_offsets(self._group, partitions)

    def commit(self, owned: Sequence[OwnedPartition]) -> list[OwnedPartition]:
        targets = _targets(owned)
        if not targets:
            return []
        try:
            self._commit_to_sink(targets)
        except SinkFencedError as exc:
            self._stats.commit_failures += 1
            log.warning("%s", exc)
            fenced = set(exc.partitions)
            return [p for p, _ in targets if p.key in fenced]
        except Exception:
            self._stats.commit_failures += 1
            log.exception("sink commit failed; will retry")
            self._rollback()
            return []
        for partition, target in targets:
            partition.committed_to(target)
        self._stats.commits += 1
        self._tell_kafka(targets)
        return []

    def _commit_to_sink(self, targets: list[tuple[OwnedPartition, int]]) -> None:
        rows = [row for partition, target in targets for row in partition.results_below(target)]
        advances = {p.key: OffsetAdvance(p.committed, target) for p, target in targets}
        self._sink.begin()
        self._sink.write(rows)
        self._sink.commit(self._group, advances)

    def _rollback(self) -> None:
        try:
            self._sink.rollback()
        except Exception:
            log.exception("sink rollback failed")

    def _tell_kafka(self, targets: list[tuple[OwnedPartition, int]]) -> None:
        offsets = [KafkaTopicPartition(p.topic, p.partition, t) for p, t in targets]
        try:
            self._consumer.commit(offsets=offsets, asynchronous=True)
        except KafkaException as exc:
            log.debug("Kafka offset commit (informational) failed: %s", exc)

    def close(self) -> None:
        self._sink.close()


class TransactionCommitter(KafkaCommitter):
    """Exactly-once from topic to topic: each commit is one Kafka transaction that writes the
    finished records' results to `output_topic` (keyed as their input) and commits their input
    offsets (`send_offsets_to_transaction`, with the consumer's group metadata so that a member
    that lost its partitions in a rebalance is fenced, KIP-447). An aborted transaction leaves
    nothing visible to read_committed readers; its results are written again by the next one.
    Each fetcher has a transactional producer of its own."""

    def __init__(
        self,
        consumer: Consumer,
        stats: FetcherStats,
        output_topic: str,
        producer_config: dict[str, Any],
    ) -> None:
        super().__init__(consumer, stats)
        self._output_topic = output_topic
        config = {"transactional.id": f"weir-{uuid.uuid4().hex}", **producer_config}
        config.pop("enable.idempotence", None)
        self._producer = Producer(config)
        self._producer.init_transactions(TRANSACTION_TIMEOUT_S)

    def commit(self, owned: Sequence[OwnedPartition]) -> list[OwnedPartition]:
        targets = _targets(owned)
        if not targets:
            return []
        try:
            self._commit_transaction(targets)
        except KafkaException as exc:
            error = exc.args[0]
            self._stats.commit_failures += 1
            if error.fatal():
                raise
            log.warning("transaction not committed: %s", error)
            if error.txn_requires_abort():
                self._abort()
            if error.code() in _LOST_OWNERSHIP:
                return [p for p, _ in targets]
            return []
        for partition, target in targets:
            partition.committed_to(target)
        self._stats.commits += 1
        return []

    def _commit_transaction(self, targets: list[tuple[OwnedPartition, int]]) -> None:
        producer = self._producer
        producer.begin_transaction()
        for partition, target in targets:
            for row in partition.results_below(target):
                while True:
                    try:
                        producer.produce(self._output_topic, row.result, key=row.key)
                        break
                    except BufferError:
                        producer.poll(0.05)
        offsets = [KafkaTopicPartition(p.topic, p.partition, t) for p, t in targets]
        producer.send_offsets_to_transaction(
            offsets, self._consumer.consumer_group_metadata(), TRANSACTION_TIMEOUT_S
        )
        producer.commit_transaction(TRANSACTION_TIMEOUT_S)

    def _abort(self) -> None:
        try:
            self._producer.abort_transaction(TRANSACTION_TIMEOUT_S)
        except KafkaException as exc:
            log.warning("transaction not aborted: %s", exc)

    def close(self) -> None:
        self._producer.flush(TRANSACTION_TIMEOUT_S)
