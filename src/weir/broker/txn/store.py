"""Durable transaction state: the compacted internal topic `__transaction_state`.

A transactional id lives in partition `abs(java hashCode(id)) % partitions`, as in Kafka. Each
change of its state is appended there as one record (key: the id; value: its state, see
`records.py`) through the replica manager with acks=all, and read back when this broker starts
or becomes the leader of a partition. Compaction keeps only the latest value per id.

Thread-safety (docs/threads.md): event-loop only (appends go through the replica manager on the
loop).
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Sequence

from kio.schema.errors import ErrorCode

from weir.broker.group.store import java_string_hash
from weir.broker.partition import ACKS_ALL, Partition
from weir.broker.replica_manager import ReplicaManager
from weir.broker.topics import (
    TRANSACTION_STATE_TOPIC,
    TopicError,
    TopicManager,
    internal_partition_count,
)
from weir.broker.txn.records import TxnLogValue, key_bytes, parse_key, parse_value, value_bytes
from weir.clock import Clock
from weir.records import BatchSpec, Compression, Record, build_batch, iter_records

log = logging.getLogger(__name__)

__all__ = ["TRANSACTION_STATE_TOPIC", "TransactionStore"]

DEFAULT_SEGMENT_BYTES = 100 * 1024 * 1024
#: how long a state write waits for the partition's ISR (Kafka: the request timeout)
REPLICATION_TIMEOUT_MS = 30_000

#: what a failed append of transaction state becomes for the client (as Kafka maps it)
_APPEND_ERRORS = {
    ErrorCode.unknown_topic_or_partition: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas_after_append: ErrorCode.coordinator_not_available,
    ErrorCode.request_timed_out: ErrorCode.coordinator_not_available,
    ErrorCode.not_leader_or_follower: ErrorCode.not_coordinator,
    ErrorCode.kafka_storage_error: ErrorCode.not_coordinator,
}


class TransactionStore:
    def __init__(
        self,
        replicas: ReplicaManager,
        topics: TopicManager,
        partitions: int,
        clock: Clock,
        *,
        replication: int = 1,
        min_isr: int = 1,
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        cluster: bool = False,
    ) -> None:
        """`replication` and `min_isr`: the topic's replication factor and min.insync.replicas
        when it is created (`transaction.state.log.replication.factor` and `.min.isr`)."""
        self._replicas = replicas
        self._topics = topics
        self._clock = clock
        self._replication = replication
        self._config = {
            "cleanup.policy": "compact",
            "compression.type": "uncompressed",
            "unclean.leader.election.enable": "false",
            "min.insync.replicas": str(min(min_isr, replication)),
            "segment.bytes": str(segment_bytes),
        }
        self._cluster = cluster
        self._configured = partitions
        self.partitions = partitions
        self._created = False
        self._take_existing()

    def _take_existing(self) -> bool:
        """Adopt the topic's partition count if it exists (whoever created it)."""
        info = self._topics.metadata.topic(TRANSACTION_STATE_TOPIC)
        if info is None:
            return False
        self.partitions = internal_partition_count(
            info, self._configured, "transaction.state.log.num.partitions"
        )
        self._created = True
        return True

    def ensure(self) -> None:
        """Create the topic on first use, as Kafka does on the first FindCoordinator."""
        if self._created or self._take_existing():
            return
        try:
            self._topics.create_now(
                TRANSACTION_STATE_TOPIC, self.partitions, dict(self._config),
                replication=self._replication,
            )  # fmt: skip
        except TopicError as exc:
            raise RuntimeError(f"cannot create {TRANSACTION_STATE_TOPIC}: {exc}") from exc
        self._created = True

    def partition_for(self, transactional_id: str) -> int:
        if not self._created:
            self._take_existing()
        h = java_string_hash(transactional_id)
        return (0 if h == -(2**31) else abs(h)) % self.partitions

    def is_coordinator(self, transactional_id: str) -> bool:
        """Whether this broker coordinates `transactional_id`: it leads the id's partition of
        `__transaction_state` (always, on a single node)."""
        if not self._cluster:
            return True
        partition = self._partition(transactional_id)
        return partition is not None and partition.is_leader

    def coordinator_epoch(self, transactional_id: str) -> int:
        """The leader epoch of the id's partition: markers carry it, so a partition can tell
        a deposed coordinator's markers from the current one's."""
        partition = self._partition(transactional_id)
        return max(partition.leader_epoch, 0) if partition is not None else 0

    def _partition(self, transactional_id: str) -> Partition | None:
        return self._replicas.get(TRANSACTION_STATE_TOPIC, self.partition_for(transactional_id))

    async def write(
        self, transactional_id: str, value: TxnLogValue | None, version: int = 0
    ) -> ErrorCode:
        """Append the id's new state (None: a tombstone) and wait for the ISR to have it."""
        try:
            self.ensure()
        except RuntimeError as exc:
            log.warning("%s", exc)
            return ErrorCode.coordinator_not_available
        index = self.partition_for(transactional_id)
        record = Record(
            offset=0,
            timestamp=self._clock.milliseconds(),
            key=key_bytes(transactional_id),
            value=None if value is None else value_bytes(value, version),
        )
        batch = build_batch([record], spec=BatchSpec(compression=Compression.NONE))
        result = self._replicas.append(
            TRANSACTION_STATE_TOPIC, index, batch, acks=ACKS_ALL, reserve_exempt=True
        )
        error = result.error
        if error is ErrorCode.none and self._replicas.replicating(
            TRANSACTION_STATE_TOPIC, index, result.end_offset
        ):
            error = await self._replicas.wait_replicated(
                TRANSACTION_STATE_TOPIC, index, result.end_offset, REPLICATION_TIMEOUT_MS
            )
        if error is not ErrorCode.none:
            log.warning(
                "writing the state of transactional id %r failed: %s", transactional_id, error.name
            )
            return _APPEND_ERRORS.get(error, ErrorCode.unknown_server_error)
        return ErrorCode.none

    def load(self, indexes: Sequence[int] | None = None) -> dict[str, TxnLogValue]:
        """The latest state of every transactional id in the partitions here, or in `indexes`."""
        state: dict[str, TxnLogValue] = {}
        for index in range(self.partitions) if indexes is None else indexes:
            partition = self._replicas.get(TRANSACTION_STATE_TOPIC, index)
            if partition is None:
                continue
            for header in partition.log.batches(partition.log.log_start_offset):
                if header.is_control:
                    continue
                for record in iter_records(header):
                    if record.key is not None:
                        _apply(state, record.key, record.value)
        return state


def _apply(state: dict[str, TxnLogValue], key: bytes, value: bytes | None) -> None:
    try:
        transactional_id = parse_key(key)
        if transactional_id is None:
            return
        if value is None:
            state.pop(transactional_id, None)
        else:
            state[transactional_id] = parse_value(value)
    except (ValueError, IndexError, UnicodeDecodeError, struct.error) as exc:
        log.warning("skipping an unreadable %s record: %s", TRANSACTION_STATE_TOPIC, exc)
