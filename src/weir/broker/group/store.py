"""Durable group state: the compacted internal topic `__consumer_offsets`.

A group lives in partition `abs(java hashCode(group id)) % partitions`, as in Kafka. Commits and
group metadata are appended there as ordinary record batches through the replica manager, and
read back from the log when the broker starts. Compaction keeps only the latest value per key.
Offsets committed inside a transaction (TxnOffsetCommit) are appended as a transactional batch
of the producer; they take effect when its COMMIT marker follows, and never after an ABORT.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from weir.broker.group.group import CommittedOffset
from weir.broker.group.records import (
    GroupKey,
    OffsetKey,
    StoredGroup,
    parse_group_value,
    parse_key,
    parse_offset_value,
)
from weir.broker.producer_state import NO_SEQUENCE
from weir.broker.replica_manager import ReplicaManager
from weir.broker.topics import OFFSETS_TOPIC, TopicError, TopicManager, internal_partition_count
from weir.clock import Clock
from weir.records import BatchSpec, Compression, Record, build_batch, iter_records
from weir.records.control import marker_commits

log = logging.getLogger(__name__)

__all__ = ["OFFSETS_TOPIC", "GroupStore", "java_string_hash"]

OFFSETS_TOPIC_CONFIG = {
    "cleanup.policy": "compact",
    "segment.bytes": str(100 * 1024 * 1024),
    "max.message.bytes": str(1024 * 1024),
}


def java_string_hash(text: str) -> int:
    """Java's String.hashCode over UTF-16 code units, as a signed 32-bit int."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + int.from_bytes(data[i : i + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


@dataclass
class LoadedState:
    groups: dict[str, StoredGroup] = field(default_factory=dict)
    offsets: dict[str, dict[tuple[str, int], CommittedOffset]] = field(default_factory=dict)
    #: producer id -> group -> offsets of a transaction not ended in the log
    pending: dict[int, dict[str, dict[tuple[str, int], CommittedOffset]]] = field(
        default_factory=dict
    )


class GroupStore:
    def __init__(
        self,
        replicas: ReplicaManager,
        topics: TopicManager,
        partitions: int,
        clock: Clock,
        *,
        replication: int = 1,
        cluster: bool = False,
    ) -> None:
        """`replication`: the offsets topic's replication factor when it is created (in a
        cluster: `offsets.topic.replication.factor`)."""
        self._replicas = replicas
        self._topics = topics
        self._clock = clock
        self._replication = replication
        self._cluster = cluster
        self._configured = partitions
        self.partitions = partitions
        self._created = False
        self._take_existing()

    def _take_existing(self) -> bool:
        """Adopt the topic's partition count if it exists (whoever created it)."""
        info = self._topics.metadata.topic(OFFSETS_TOPIC)
        if info is None:
            return False
        self.partitions = internal_partition_count(
            info, self._configured, "offsets.topic.num.partitions"
        )
        self._created = True
        return True

    def _ensure_topic(self) -> None:
        """Create the topic on first use, as Kafka does on the first FindCoordinator."""
        if self._created or self._take_existing():
            return
        try:
            self._topics.create_now(
                OFFSETS_TOPIC,
                self.partitions,
                dict(OFFSETS_TOPIC_CONFIG),
                replication=self._replication,
            )
        except TopicError as exc:
            raise RuntimeError(f"cannot create {OFFSETS_TOPIC}: {exc}") from exc
        self._created = True

    def partition_for(self, group_id: str) -> int:
        if not self._created:
            self._take_existing()
        h = java_string_hash(group_id)
        return (0 if h == -(2**31) else abs(h)) % self.partitions

    def write(
        self,
        group_id: str,
        entries: Sequence[tuple[bytes, bytes | None]],
        *,
        producer: tuple[int, int] | None = None,
    ) -> ErrorCode:
        """Append (key, value) records for `group_id` as one batch; the append's error code.
        With `producer` (id, epoch) the batch belongs to that producer's transaction."""
        if not entries:
            return ErrorCode.none
        self._ensure_topic()
        now = self._clock.milliseconds()
        records = [Record(offset=i, timestamp=now, key=k, value=v)
                   for i, (k, v) in enumerate(entries)]  # fmt: skip
        spec = BatchSpec(compression=Compression.NONE)
        if producer is not None:
            spec = BatchSpec(compression=Compression.NONE, producer_id=producer[0],
                             producer_epoch=producer[1], base_sequence=NO_SEQUENCE,
                             transactional=True)  # fmt: skip
        batch = build_batch(records, spec=spec)
        result = self._replicas.append(
            OFFSETS_TOPIC, self.partition_for(group_id), batch, reserve_exempt=True
        )
        if result.error is ErrorCode.message_too_large:
            return ErrorCode.unknown_server_error  # what Kafka answers for an oversized group
        if result.error in (ErrorCode.kafka_storage_error, ErrorCode.not_leader_or_follower):
            return ErrorCode.not_coordinator  # as Kafka: the client finds the coordinator again
        return result.error

    def ensure(self) -> None:
        self._ensure_topic()

    def is_coordinator(self, group_id: str) -> bool:
        """Whether this broker coordinates `group_id`: it leads the group's partition of
        `__consumer_offsets` (always, on a single node)."""
        if not self._cluster:
            return True
        partition = self._replicas.get(OFFSETS_TOPIC, self.partition_for(group_id))
        return partition is not None and partition.is_leader

    def load(self, indexes: Sequence[int] | None = None) -> LoadedState:
        """Group state from the log of every partition here, or of `indexes`."""
        state = LoadedState()
        for index in range(self.partitions) if indexes is None else indexes:
            partition = self._replicas.get(OFFSETS_TOPIC, index)
            if partition is None:
                continue
            in_transaction: dict[int, list[tuple[bytes, bytes | None]]] = {}
            for header in partition.log.batches(partition.log.log_start_offset):
                if header.is_control:
                    entries = in_transaction.pop(header.producer_id, [])
                    if marker_commits(header):
                        for key, value in entries:
                            self._apply(state, key, value)
                    continue
                records = [(r.key, r.value) for r in iter_records(header) if r.key is not None]
                if header.is_transactional:
                    in_transaction.setdefault(header.producer_id, []).extend(records)
                    continue
                for key, value in records:
                    self._apply(state, key, value)
            for producer_id, entries in in_transaction.items():
                self._pend(state, producer_id, entries)
        return state

    @staticmethod
    def _pend(
        state: LoadedState, producer_id: int, entries: list[tuple[bytes, bytes | None]]
    ) -> None:
        pending = state.pending.setdefault(producer_id, {})
        for key, value in entries:
            try:
                parsed = parse_key(key)
                if isinstance(parsed, OffsetKey) and value is not None:
                    offsets = pending.setdefault(parsed.group, {})
                    offsets[(parsed.topic, parsed.partition)] = parse_offset_value(value)
            except (ValueError, IndexError, UnicodeDecodeError, struct.error) as exc:
                log.warning("skipping an unreadable %s record: %s", OFFSETS_TOPIC, exc)

    @staticmethod
    def _apply(state: LoadedState, key: bytes, value: bytes | None) -> None:
        try:
            parsed = parse_key(key)
            if isinstance(parsed, OffsetKey):
                offsets = state.offsets.setdefault(parsed.group, {})
                tp = (parsed.topic, parsed.partition)
                if value is None:
                    offsets.pop(tp, None)
                else:
                    offsets[tp] = parse_offset_value(value)
            elif isinstance(parsed, GroupKey):
                if value is None:
                    state.groups.pop(parsed.group, None)
                    state.offsets.pop(parsed.group, None)
                else:
                    state.groups[parsed.group] = parse_group_value(value)
        except (ValueError, IndexError, UnicodeDecodeError, struct.error) as exc:
            log.warning("skipping an unreadable %s record: %s", OFFSETS_TOPIC, exc)
