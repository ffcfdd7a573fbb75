"""The partitions this broker leads: appends with validation and producer checks, reads for
fetch (long poll without busy loops), offsets by time, and record deletion.

Waiting fetches park on a per-partition future that the next append resolves, so a fetch with
`max_wait_ms` sleeps until data arrives or the wait runs out, never polling.

Storage failures become KAFKA_STORAGE_ERROR for the request that met them: a full disk (or free
space below `log.dir.min.free.bytes`) refuses appends until space returns; a failed directory
takes its partitions offline (produce, fetch and offsets refused, Metadata shows the replica
offline) until a restart.

Thread-safety: event-loop only. Logs guard themselves against the storage scheduler's thread.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from weir.broker.producer_state import ProducerStateError, ProducerStateManager
from weir.clock import Clock
from weir.records import (
    BatchHeader,
    Compression,
    RecordError,
    check_keys,
    check_timestamps,
    recompress,
    validate_batch,
)
from weir.storage import FileSlice, LogConfig, LogManager, OffsetOutOfRangeError, PartitionLog
from weir.storage.errors import LogDirectoryError, LogWriteError, StorageError

log = logging.getLogger(__name__)

LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
LEADER_EPOCH = 0
REFUSAL_LOG_INTERVAL_MS = 10_000
ACKS_ALL = -1
ISR_SIZE = 1  # a single node is its partitions' only replica
#: compression.type values other than `producer` -> the codec the broker stores batches with
STORED_CODEC = {
    "uncompressed": Compression.NONE,
    "gzip": Compression.GZIP,
    "snappy": Compression.SNAPPY,
    "lz4": Compression.LZ4,
    "zstd": Compression.ZSTD,
}


@dataclass(slots=True)
class Partition:
    topic: str
    index: int
    log: PartitionLog
    producers: ProducerStateManager
    leader_epoch: int = LEADER_EPOCH
    #: whether this broker leads the partition (a single node leads all of its partitions)
    is_leader: bool = True
    waiters: list[asyncio.Future[None]] = field(default_factory=list)

    @property
    def serving(self) -> bool:
        """Whether clients may produce to and fetch from it here."""
        return self.is_leader and self.log.offline_reason is None

    def wake_waiters(self) -> None:
        waiters, self.waiters = self.waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)


@dataclass(frozen=True, slots=True)
class AppendResult:
    error: ErrorCode
    base_offset: int = -1
    log_append_time: int = -1
    log_start_offset: int = -1
    message: str | None = None
    record_errors: tuple[tuple[int, str], ...] = ()


@dataclass(frozen=True, slots=True)
class FetchRequestPartition:
    topic: str
    partition: int
    offset: int
    max_bytes: int


@dataclass(frozen=True, slots=True)
class FetchResult:
    topic: str
    partition: int
    error: ErrorCode
    high_watermark: int = -1
    log_start_offset: int = -1
    data: FileSlice | None = None


class ReplicaManager:
    def __init__(
        self,
        log_manager: LogManager,
        clock: Clock,
        *,
        min_free_bytes: int = 0,
        leads_all: bool = True,
    ):
        """`leads_all`: this broker leads every partition it has (a single node); in a
        cluster a partition is served only once the controller made this broker its leader."""
        self.log_manager = log_manager
        self._leads_all = leads_all
        self._clock = clock
        self._min_free_bytes = min_free_bytes
        self._last_refusal_log: dict[tuple[str, int], int] = {}
        self.partitions: dict[tuple[str, int], Partition] = {}
        for (topic, index), partition_log in log_manager:
            self._adopt(topic, index, partition_log)

    # ---- partitions ---------------------------------------------------------------------------

    def _adopt(self, topic: str, index: int, partition_log: PartitionLog) -> Partition:
        producers = ProducerStateManager()
        start = partition_log.segments[max(0, len(partition_log.segments) - 2)].base_offset
        producers.load(partition_log.batch_headers(start))
        partition = Partition(topic, index, partition_log, producers, is_leader=self._leads_all)
        if self._leads_all:
            self._record_leader_epoch(partition)
        self.partitions[(topic, index)] = partition
        return partition

    @staticmethod
    def _record_leader_epoch(partition: Partition) -> None:
        try:
            partition.log.assign_leader_epoch(partition.leader_epoch)
        except OSError as exc:  # the first append assigns it, or refuses while the disk is full
            log.warning(
                "%s-%d: leader epoch not recorded yet: %s", partition.topic, partition.index, exc
            )

    def become_leader(self, topic: str, index: int, leader_epoch: int, config: LogConfig) -> None:
        """Lead `topic-index` from `leader_epoch` on (its log created if new). StorageError
        if the log cannot be created."""
        partition = self._ensure(topic, index, config)
        partition.leader_epoch = leader_epoch
        partition.is_leader = True
        self._record_leader_epoch(partition)

    def become_follower(self, topic: str, index: int, leader_epoch: int, config: LogConfig) -> None:
        """Stop serving `topic-index` here: another broker leads it from `leader_epoch`."""
        partition = self._ensure(topic, index, config)
        partition.leader_epoch = leader_epoch
        partition.is_leader = False
        partition.wake_waiters()

    def stop_replica(self, topic: str, index: int, *, delete: bool) -> None:
        partition = self.partitions.get((topic, index))
        if partition is None:
            if delete and (topic, index) in self.log_manager.offline_partitions:
                self.log_manager.delete(topic, index)
            return
        partition.is_leader = False
        partition.wake_waiters()
        if delete:
            del self.partitions[(topic, index)]
            self.log_manager.delete(topic, index)

    def _ensure(self, topic: str, index: int, config: LogConfig) -> Partition:
        partition = self.partitions.get((topic, index))
        if partition is not None:
            return partition
        self.log_manager.set_topic_config(topic, config)
        return self._adopt(topic, index, self.log_manager.get_or_create(topic, index))

    def create_partitions(self, topic: str, count: int, config: LogConfig) -> None:
        """Logs for partitions 0..count-1 of `topic`. StorageError if one cannot be created
        (those before it stay); one in an offline directory is skipped, offline."""
        self.log_manager.set_topic_config(topic, config)
        for index in range(count):
            if (topic, index) in self.partitions or self.is_offline(topic, index):
                continue
            self._adopt(topic, index, self.log_manager.get_or_create(topic, index))

    def is_offline(self, topic: str, index: int) -> bool:
        partition = self.partitions.get((topic, index))
        if partition is not None:
            return partition.log.offline_reason is not None
        return (topic, index) in self.log_manager.offline_partitions

    def delete_topic(self, topic: str) -> None:
        for key in [k for k in self.partitions if k[0] == topic]:
            partition = self.partitions.pop(key)
            partition.wake_waiters()
            self.log_manager.delete(*key)

    def get(self, topic: str, index: int) -> Partition | None:
        return self.partitions.get((topic, index))

    # ---- produce ------------------------------------------------------------------------------

    def append(
        self,
        topic: str,
        index: int,
        records: bytes | None,
        *,
        acks: int = 1,
        reserve_exempt: bool = False,
    ) -> AppendResult:
        """Validate and append one batch under its topic's rules. `reserve_exempt` appends below
        the free-space floor (the broker's own small internal writes, which the floor exists to
        make room for)."""
        partition = self.partitions.get((topic, index))
        if partition is None or not partition.serving:
            return self._missing_or_offline(topic, index)
        if not records:
            return AppendResult(ErrorCode.corrupt_message, message="no record batch")
        config = partition.log.config
        try:
            header = validate_batch(
                records,
                max_message_bytes=config.max_message_bytes,
            )
            self._check_topic_rules(partition, header)
            duplicate = partition.producers.check(header.fields())
        except RecordError as exc:
            return AppendResult(
                ErrorCode(exc.error_code), message=str(exc), record_errors=exc.record_errors
            )
        except ProducerStateError as exc:
            return AppendResult(ErrorCode(exc.error_code), message=str(exc))
        if duplicate is not None:
            return AppendResult(
                ErrorCode.none, duplicate.first_offset, -1, partition.log.log_start_offset
            )
        if acks == ACKS_ALL and config.min_insync_replicas > ISR_SIZE:
            message = (
                f"The size of the current ISR {ISR_SIZE} is insufficient to satisfy the min.isr "
                f"requirement of {config.min_insync_replicas} for partition {topic}-{index}"
            )
            return AppendResult(ErrorCode.not_enough_replicas, message=message)
        if not reserve_exempt:
            shortfall = self.log_manager.free_space_shortfall(topic, index, self._min_free_bytes)
            if shortfall is not None:
                return self._refuse(partition, shortfall)
        return self._append_validated(partition, _stored_form(records, header, config))

    def _check_topic_rules(self, partition: Partition, header: BatchHeader) -> None:
        """What the topic's configs demand of every record: keys on a compacted topic, and
        timestamps within message.timestamp.before/after.max.ms of the broker's clock."""
        config = partition.log.config
        if config.compact:
            check_keys(header, f"{partition.topic}-{partition.index}")
        bounds = config.timestamp_bounds
        if bounds is not None:
            now = self._clock.milliseconds()
            check_timestamps(header, now - bounds[0], _saturated(now + bounds[1]))

    def _missing_or_offline(self, topic: str, index: int) -> AppendResult:
        if self.is_offline(topic, index):
            message = f"{topic}-{index} is in an offline log directory"
            return AppendResult(ErrorCode.kafka_storage_error, message=message)
        if (topic, index) in self.partitions:
            message = f"this broker does not lead {topic}-{index}"
            return AppendResult(ErrorCode.not_leader_or_follower, message=message)
        return AppendResult(ErrorCode.unknown_topic_or_partition)

    def _refuse(self, partition: Partition, why: str) -> AppendResult:
        """KAFKA_STORAGE_ERROR for a write the disk has no room for, logged now and then."""
        key = (partition.topic, partition.index)
        now = self._clock.monotonic_ms()
        last = self._last_refusal_log.get(key)
        if last is None or now - last >= REFUSAL_LOG_INTERVAL_MS:
            self._last_refusal_log[key] = now
            log.warning("refusing appends to %s-%d: %s", partition.topic, partition.index, why)
        return AppendResult(ErrorCode.kafka_storage_error, message=why)

    def _append_validated(self, partition: Partition, records: bytes) -> AppendResult:
        buf = bytearray(records)
        try:
            info = partition.log.append(buf, leader_epoch=partition.leader_epoch)
        except LogWriteError as exc:
            return self._refuse(partition, str(exc))
        except StorageError as exc:
            self._take_offline(partition, exc)
            return AppendResult(ErrorCode.kafka_storage_error, message=str(exc))
        self.log_manager.note_appended(partition.topic, partition.index, len(buf))
        partition.producers.record(BatchHeader(buf).fields(), info.first_offset)
        partition.wake_waiters()
        return AppendResult(
            ErrorCode.none, info.first_offset, info.log_append_time, info.log_start_offset
        )

    # ---- fetch --------------------------------------------------------------------------------

    async def fetch(
        self,  # the results' file slices are the caller's: `release` them once sent
        requests: Sequence[FetchRequestPartition],
        *,
        max_wait_ms: int,
        min_bytes: int,
        max_bytes: int,
    ) -> list[FetchResult]:
        """Read every requested partition; wait up to `max_wait_ms` for `min_bytes` in all."""
        deadline = self._clock.monotonic_ms() + max_wait_ms
        while True:
            results = self._read_all(requests, max_bytes)
            available = sum(r.data.size for r in results if r.data is not None)
            errors = any(r.error != ErrorCode.none for r in results)
            remaining = deadline - self._clock.monotonic_ms()
            if available >= min_bytes or errors or remaining <= 0 or not requests:
                return results
            release(results)
            await self._wait_for_data(requests, remaining)

    def _read_all(
        self, requests: Sequence[FetchRequestPartition], max_bytes: int
    ) -> list[FetchResult]:
        results = []
        budget = max_bytes
        for request in requests:
            result = self._read_one(request, budget, min_one_batch=budget == max_bytes)
            if result.data is not None:
                budget = max(0, budget - result.data.size)
            results.append(result)
        return results

    def _take_offline(self, partition: Partition, exc: Exception) -> None:
        self.log_manager.take_offline(partition.topic, partition.index, str(exc))
        partition.log.take_offline(str(exc))
        for other in self.partitions.values():
            if other.log.offline_reason is not None:
                other.wake_waiters()

    def _read_one(
        self, request: FetchRequestPartition, budget: int, *, min_one_batch: bool
    ) -> FetchResult:
        partition = self.partitions.get((request.topic, request.partition))
        if partition is None or not partition.serving:
            error = self._missing_or_offline(request.topic, request.partition).error
            return FetchResult(request.topic, request.partition, error)
        limit = min(budget, request.max_bytes)
        try:
            info = partition.log.read(
                request.offset, limit, min_one_batch=min_one_batch, retain=True
            )
        except LogDirectoryError:
            return FetchResult(request.topic, request.partition, ErrorCode.kafka_storage_error)
        except OffsetOutOfRangeError:
            partition_log = partition.log
            return FetchResult(
                request.topic,
                request.partition,
                ErrorCode.offset_out_of_range,
                partition_log.high_watermark,
                partition_log.log_start_offset,
            )
        data = info.data if limit > 0 or min_one_batch else None
        return FetchResult(
            request.topic,
            request.partition,
            ErrorCode.none,
            info.high_watermark,
            info.log_start_offset,
            data,
        )

    async def _wait_for_data(
        self, requests: Sequence[FetchRequestPartition], timeout_ms: int
    ) -> None:
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        watched = [p for r in requests if (p := self.partitions.get((r.topic, r.partition)))]
        for partition in watched:
            partition.waiters.append(waiter)
        try:
            await asyncio.wait_for(waiter, timeout_ms / 1000)
        except TimeoutError:
            pass
        finally:
            for partition in watched:
                if waiter in partition.waiters:
                    partition.waiters.remove(waiter)

    # ---- offsets ------------------------------------------------------------------------------

    def list_offset(self, topic: str, index: int, timestamp: int) -> tuple[ErrorCode, int, int]:
        """(error, offset, timestamp) for ListOffsets: -1 latest, -2 earliest, -3 max timestamp,
        else the first offset whose timestamp is >= `timestamp` (offset -1 if none)."""
        partition = self.partitions.get((topic, index))
        if partition is None or not partition.serving:
            return self._missing_or_offline(topic, index).error, -1, -1
        partition_log = partition.log
        if timestamp == LATEST_TIMESTAMP:
            return ErrorCode.none, partition_log.high_watermark, -1
        if timestamp == EARLIEST_TIMESTAMP:
            return ErrorCode.none, partition_log.log_start_offset, -1
        if timestamp == MAX_TIMESTAMP:
            offset, ts = partition_log.max_timestamp_offset()
            return ErrorCode.none, offset, ts
        if timestamp < 0:
            return ErrorCode.invalid_request, -1, -1
        found = partition_log.offset_for_timestamp(timestamp)
        if found is None or found[0] >= partition_log.high_watermark:
            return ErrorCode.none, -1, -1
        return ErrorCode.none, found[0], found[1]

    def delete_records(self, topic: str, index: int, offset: int) -> tuple[ErrorCode, int]:
        """Move the log start offset to `offset` (-1: the high watermark).
        Returns (error, low watermark)."""
        partition = self.partitions.get((topic, index))
        if partition is None or not partition.serving:
            return self._missing_or_offline(topic, index).error, -1
        partition_log = partition.log
        target = partition_log.high_watermark if offset == -1 else offset
        try:
            partition_log.increment_log_start_offset(target)
        except OffsetOutOfRangeError:
            return ErrorCode.offset_out_of_range, partition_log.log_start_offset
        try:
            partition_log.delete_old_segments(retention=False)
        except OSError as exc:
            log.warning("%s-%d: segments below the log start offset kept for now: %s",
                        topic, index, exc)  # fmt: skip
        except LogDirectoryError as exc:
            self._take_offline(partition, exc)
        return ErrorCode.none, partition_log.log_start_offset


def _saturated(value: int) -> int:
    return min(value, 2**63 - 1)


def _stored_form(records: bytes, header: BatchHeader, config: LogConfig) -> bytes:
    """The batch as the topic stores it: recompressed when compression.type names a codec other
    than the producer's."""
    codec = STORED_CODEC.get(config.compression_type)
    if codec is None or codec == header.compression:
        return records
    level = {
        Compression.GZIP: config.compression_gzip_level,
        Compression.LZ4: config.compression_lz4_level,
        Compression.ZSTD: config.compression_zstd_level,
    }.get(codec)
    return recompress(header, codec, None if level == -1 else level)


def release(results: Sequence[FetchResult]) -> None:
    """Close the file slices a fetch handed out."""
    for result in results:
        if result.data is not None:
            result.data.close()
