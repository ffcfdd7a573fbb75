"""The partitions this broker leads: appends with validation and producer checks, reads for
fetch (long poll without busy loops), offsets by time, and record deletion.

Waiting fetches park on a per-partition future that the next append resolves, so a fetch with
`max_wait_ms` sleeps until data arrives or the wait runs out, never polling.

Storage failures become KAFKA_STORAGE_ERROR for the request that met them: a full disk (or free
space below `log.dir.min.free.bytes`) refuses appends until space returns; a failed directory
takes its partitions offline (produce, fetch and offsets refused, Metadata shows the replica
offline) until a restart.

Thread-safety (docs/threads.md): event-loop only. Logs guard themselves against the storage
scheduler's thread.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from weir.broker.producer_state import ProducerStateError, ProducerStateManager
from weir.broker.replication import LeaderState, preferred_read_replica
from weir.clock import Clock
from weir.records import (
    BatchHeader,
    Compression,
    HeaderFields,
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
    #: the followers, when this broker leads a partition with several replicas
    leader_state: LeaderState | None = None
    #: acks=all produces waiting for the high watermark to reach their end offset
    produce_waiters: list[tuple[int, asyncio.Future[ErrorCode]]] = field(default_factory=list)

    @property
    def serving(self) -> bool:
        """Whether clients may produce to and fetch from it here."""
        return self.is_leader and self.log.offline_reason is None

    @property
    def last_stable_offset(self) -> int:
        """The high watermark, or the first offset of the oldest open transaction below it:
        read_committed consumers read up to here."""
        high_watermark = self.log.high_watermark
        unstable = self.producers.first_unstable_offset()
        return high_watermark if unstable is None else min(unstable, high_watermark)

    def record_batch(self, fields: HeaderFields, first_offset: int, commit: bool | None) -> None:
        """Producer state after a batch reached the log; an ABORT marker's transaction goes to
        the log's aborted-transaction index. LogDirectoryError if that cannot be written."""
        aborted = self.producers.record(fields, first_offset, commit)
        if aborted is not None:
            self.log.index_aborted_txn(aborted)

    def load_producer_state(self) -> None:
        """Producer state from the log's newest snapshot and the batches after it (those
        replayed also re-index their aborted transactions); snapshotted again at the log end
        if anything was replayed, so the next load starts there."""
        replay = self.log.producer_state_replay()
        entries = replay.snapshot.entries if replay.snapshot is not None else ()
        self.producers = ProducerStateManager.restored(entries)
        self.log.producer_state_source = self.producers.snapshot_entries
        replayed = self.log.load_report.replayed_batches
        for fields, commit in replay.batches:
            self.record_batch(fields, fields.base_offset, commit)
        if self.log.load_report.replayed_batches > replayed and self.producers.producers:
            try:
                self.log.take_producer_snapshot()
            except OSError as exc:
                log.warning("%s-%d: no producer snapshot after loading: %s", self.topic,
                            self.index, exc)  # fmt: skip

    def wake_waiters(self) -> None:
        waiters, self.waiters = self.waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def complete_produces(self, error: ErrorCode | None = None) -> None:
        """Answer acks=all produces: those the high watermark has reached, or all of them
        with `error` (leadership lost)."""
        high_watermark = self.log.high_watermark
        waiting = []
        for end, future in self.produce_waiters:
            if future.done():
                continue
            if error is not None:
                future.set_result(error)
            elif end <= high_watermark:
                future.set_result(ErrorCode.none)
            else:
                waiting.append((end, future))
        self.produce_waiters = waiting


@dataclass(frozen=True, slots=True)
class AppendResult:
    error: ErrorCode
    base_offset: int = -1
    log_append_time: int = -1
    log_start_offset: int = -1
    message: str | None = None
    record_errors: tuple[tuple[int, str], ...] = ()
    #: the log end offset right after the append (what acks=all waits for)
    end_offset: int = -1


@dataclass(frozen=True, slots=True)
class FetchRequestPartition:
    topic: str
    partition: int
    offset: int
    max_bytes: int
    #: the leader epoch the fetcher believes current (KIP-320); -1 when it does not say
    current_leader_epoch: int = -1


@dataclass(frozen=True, slots=True)
class FetchResult:
    topic: str
    partition: int
    error: ErrorCode
    high_watermark: int = -1
    log_start_offset: int = -1
    data: FileSlice | None = None
    #: the replica the consumer should read this partition from instead (KIP-392); -1: here
    preferred_read_replica: int = -1
    last_stable_offset: int = -1
    #: for read_committed: (producer id, first offset) of aborted transactions in the range
    aborted: tuple[tuple[int, int], ...] | None = None


class ReplicaManager:
    def __init__(
        self,
        log_manager: LogManager,
        clock: Clock,
        *,
        min_free_bytes: int = 0,
        leads_all: bool = True,
        node_id: int = 0,
        replica_lag_time_max_ms: int = 30_000,
    ):
        """`leads_all`: this broker leads every partition it has (a single node); in a
        cluster a partition is served only once the controller made this broker its leader."""
        self.log_manager = log_manager
        self._leads_all = leads_all
        self.node_id = node_id
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        #: called with (partition, proposed ISR) when a leader wants its ISR changed
        self.on_isr_proposal: Callable[[Partition, frozenset[int]], None] | None = None
        self._clock = clock
        self._min_free_bytes = min_free_bytes
        self._last_refusal_log: dict[tuple[str, int], int] = {}
        self.partitions: dict[tuple[str, int], Partition] = {}
        for (topic, index), partition_log in log_manager:
            self._adopt(topic, index, partition_log)

    # ---- partitions ---------------------------------------------------------------------------

    def _adopt(self, topic: str, index: int, partition_log: PartitionLog) -> Partition:
        partition = self._loaded(topic, index, partition_log)
        self.partitions[(topic, index)] = partition
        return partition

    def _loaded(self, topic: str, index: int, partition_log: PartitionLog) -> Partition:
        """A partition on its log with its producer state loaded, not yet served. Touches
        nothing shared: callable from a storage thread."""
        partition = Partition(
            topic, index, partition_log, ProducerStateManager(), is_leader=self._leads_all
        )
        partition.load_producer_state()
        if self._leads_all:
            self._record_leader_epoch(partition)
        return partition

    @staticmethod
    def reload_producer_state(partition: Partition) -> None:
        """Rebuild producer state from the log (after a truncation)."""
        partition.load_producer_state()

    @staticmethod
    def _record_leader_epoch(partition: Partition) -> None:
        try:
            partition.log.assign_leader_epoch(partition.leader_epoch)
        except OSError as exc:  # the first append assigns it, or refuses while the disk is full
            log.warning(
                "%s-%d: leader epoch not recorded yet: %s", partition.topic, partition.index, exc
            )

    def become_leader(
        self,
        topic: str,
        index: int,
        leader_epoch: int,
        config: LogConfig,
        *,
        replicas: Sequence[int] = (),
        isr: Sequence[int] = (),
        partition_epoch: int = 0,
    ) -> None:
        """Lead `topic-index` from `leader_epoch` on (its log created if new), with `replicas`
        and `isr` as the controller gave them. StorageError if the log cannot be created."""
        partition = self._ensure(topic, index, config)
        state = partition.leader_state
        if partition.is_leader and partition.leader_epoch == leader_epoch and state is not None:
            if partition_epoch > state.partition_epoch:  # the controller changed the ISR
                state.isr, state.partition_epoch = frozenset(isr), partition_epoch
                state.pending_isr = None
                self._advance_high_watermark(partition)
            return
        partition.leader_epoch = leader_epoch
        partition.is_leader = True
        replicated = len(replicas) > 1
        if replicated:
            partition.log.become_replicated()
        else:
            partition.log.replicated = False
        self._record_leader_epoch(partition)
        partition.leader_state = None
        if replicated:
            partition.leader_state = LeaderState(
                node_id=self.node_id,
                replicas=tuple(replicas),
                isr=frozenset(isr) | {self.node_id},
                partition_epoch=partition_epoch,
                epoch_start_offset=partition.log.log_end_offset,
                started_ms=self._clock.monotonic_ms(),
            )
            self._advance_high_watermark(partition)
        else:
            partition.log.update_high_watermark(partition.log.log_end_offset)

    def become_follower(self, topic: str, index: int, leader_epoch: int, config: LogConfig) -> None:
        """Stop serving `topic-index` here: another broker leads it from `leader_epoch`."""
        partition = self._ensure(topic, index, config)
        partition.leader_epoch = leader_epoch
        partition.is_leader = False
        partition.leader_state = None
        partition.log.become_replicated()
        partition.complete_produces(ErrorCode.not_leader_or_follower)
        partition.wake_waiters()

    def stop_replica(self, topic: str, index: int, *, delete: bool) -> None:
        partition = self.partitions.get((topic, index))
        if partition is None:
            if delete and (topic, index) in self.log_manager.offline_partitions:
                self.log_manager.delete(topic, index)
            return
        partition.is_leader = False
        partition.leader_state = None
        partition.complete_produces(ErrorCode.not_leader_or_follower)
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

    async def open_partitions(self, topic: str, indexes: Sequence[int], config: LogConfig) -> None:
        """Logs for `indexes` of `topic` (those not here yet), created on the default executor
        so that the loop never waits on their files, then served from here. StorageError if one
        cannot be created; those opened before it are served (the caller removes them)."""
        self.log_manager.set_topic_config(topic, config)
        wanted = [i for i in indexes if not self._known(topic, i)]
        loop = asyncio.get_running_loop()
        opened, error = await loop.run_in_executor(None, self._open_logs, topic, wanted)
        for partition in opened:
            self.partitions[(topic, partition.index)] = partition
        if error is not None:
            raise error

    def _open_logs(
        self, topic: str, indexes: Sequence[int]
    ) -> tuple[list[Partition], StorageError | None]:
        """On a storage thread: the partitions whose logs were created, and the error that
        stopped the rest (None if all were)."""
        opened: list[Partition] = []
        for index in indexes:
            try:
                partition_log = self.log_manager.get_or_create(topic, index)
            except StorageError as exc:
                return opened, exc
            opened.append(self._loaded(topic, index, partition_log))
        return opened, None

    async def remove_partitions(self, topic: str, indexes: Sequence[int]) -> None:
        """Stop serving `indexes` of `topic` at once and delete their logs on the default
        executor (one checkpoint write for them all)."""
        keys = [(topic, i) for i in indexes]
        for key in keys:
            partition = self.partitions.pop(key, None)
            if partition is not None:
                partition.complete_produces(ErrorCode.unknown_topic_or_partition)
                partition.wake_waiters()
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, self.log_manager.delete_many, keys)

    def _known(self, topic: str, index: int) -> bool:
        return (topic, index) in self.partitions or self.is_offline(topic, index)

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
        except RecordError as exc:
            return AppendResult(
                ErrorCode(exc.error_code), message=str(exc), record_errors=exc.record_errors
            )
        duplicate, producer_error = None, None
        try:
            duplicate = partition.producers.check(header.fields())
        except ProducerStateError as exc:
            producer_error = exc
        if duplicate is not None:
            # A retry of a batch already in the log: answered as the original is, once it is
            # replicated (acks=all then waits, and reports a short ISR as
            # NOT_ENOUGH_REPLICAS_AFTER_APPEND). Never NOT_ENOUGH_REPLICAS, which tells the
            # producer the batch was not written: it would send it again under a new epoch.
            return AppendResult(
                ErrorCode.none,
                duplicate.first_offset,
                -1,
                partition.log.log_start_offset,
                end_offset=duplicate.last_offset + 1,
            )
        isr_size = len(partition.leader_state.isr) if partition.leader_state else ISR_SIZE
        if acks == ACKS_ALL and config.min_insync_replicas > isr_size:
            message = (
                f"The size of the current ISR {isr_size} is insufficient to satisfy the min.isr "
                f"requirement of {config.min_insync_replicas} for partition {topic}-{index}"
            )
            return AppendResult(ErrorCode.not_enough_replicas, message=message)
        if producer_error is not None:
            # after the ISR check, as Kafka orders them: a producer whose earlier batch was
            # refused for a short ISR gets the same answer for the batches it had pipelined
            # behind it, not OUT_OF_ORDER_SEQUENCE_NUMBER (which makes librdkafka bump its
            # epoch and resend batches that may already be written)
            return AppendResult(ErrorCode(producer_error.error_code), message=str(producer_error))
        if not reserve_exempt:
            shortfall = self.log_manager.free_space_shortfall(topic, index, self._min_free_bytes)
            if shortfall is not None:
                return self._refuse(partition, shortfall)
        if header.is_transactional:
            try:
                partition.log.note_transactions()
            except OSError as exc:
                return self._refuse(partition, f"cannot record transactions: {exc}")
        stored = _stored_form(records, header, config)
        return self._append_validated(partition, stored, defer_sync=acks != 1)

    def append_marker(self, topic: str, index: int, batch: bytes, commit: bool) -> AppendResult:
        """Append a COMMIT or ABORT control batch (built by the broker, so not validated as a
        client's batch is) that ends its producer's transaction on this partition."""
        partition = self.partitions.get((topic, index))
        if partition is None or not partition.serving:
            return self._missing_or_offline(topic, index)
        try:
            partition.log.note_transactions()
        except OSError as exc:
            return self._refuse(partition, f"cannot record transactions: {exc}")
        return self._append_validated(partition, batch, commit)

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

    def _append_validated(
        self,
        partition: Partition,
        records: bytes,
        commit: bool | None = None,
        *,
        defer_sync: bool = False,
    ) -> AppendResult:
        """`defer_sync`: a flush the batch makes due (`flush.messages`) runs on the storage
        thread, not here; acks=all then waits for it (`wait_replicated`), acks=0 does not."""
        buf = bytearray(records)
        try:
            info = partition.log.append(
                buf, leader_epoch=partition.leader_epoch, defer_sync=defer_sync
            )
        except LogWriteError as exc:
            return self._refuse(partition, str(exc))
        except StorageError as exc:
            self._take_offline(partition, exc)
            return AppendResult(ErrorCode.kafka_storage_error, message=str(exc))
        self.log_manager.note_appended(partition.topic, partition.index, len(buf))
        try:
            partition.record_batch(BatchHeader(buf).fields(), info.first_offset, commit)
        except StorageError as exc:
            self._take_offline(partition, exc)
            return AppendResult(ErrorCode.kafka_storage_error, message=str(exc))
        if partition.leader_state is not None:
            self._advance_high_watermark(partition)
        partition.wake_waiters()
        return AppendResult(
            ErrorCode.none,
            info.first_offset,
            info.log_append_time,
            info.log_start_offset,
            end_offset=partition.log.log_end_offset,
        )

    # ---- replication (leader side) ------------------------------------------------------------

    def replicating(self, topic: str, index: int, end_offset: int) -> bool:
        """Whether records up to `end_offset` still wait for followers, or for the flush
        `flush.messages` made due (acks=all)."""
        partition = self.partitions.get((topic, index))
        if partition is None:
            return False
        if partition.leader_state is not None and partition.log.high_watermark < end_offset:
            return True
        return partition.log.awaits_sync(end_offset)

    async def wait_replicated(
        self, topic: str, index: int, end_offset: int, timeout_ms: int
    ) -> ErrorCode:
        """For acks=all: wait until the high watermark reaches `end_offset` (every ISR member
        has the records), then check the ISR is still large enough."""
        partition = self.partitions.get((topic, index))
        if partition is None or not partition.is_leader:
            return ErrorCode.not_leader_or_follower
        if partition.log.high_watermark < end_offset:
            future: asyncio.Future[ErrorCode] = asyncio.get_running_loop().create_future()
            partition.produce_waiters.append((end_offset, future))
            try:
                async with asyncio.timeout(timeout_ms / 1000):
                    error = await future
            except TimeoutError:
                return ErrorCode.request_timed_out
            if error is not ErrorCode.none:
                return error
        if partition.log.awaits_sync(end_offset):
            error = await self._wait_synced(partition, end_offset, timeout_ms)
            if error is not ErrorCode.none:
                return error
        state = partition.leader_state
        if state is not None and len(state.isr) < partition.log.config.min_insync_replicas:
            return ErrorCode.not_enough_replicas_after_append
        return ErrorCode.none

    @staticmethod
    async def _wait_synced(partition: Partition, end_offset: int, timeout_ms: int) -> ErrorCode:
        """Wait for the storage thread's flush to cover `end_offset`; fetches parked meanwhile
        are woken (under `high.watermark.policy=flushed` it moved the high watermark)."""
        loop = asyncio.get_running_loop()
        flushed: asyncio.Future[bool] = loop.create_future()
        partition.log.when_flushed(
            end_offset, lambda ok: loop.call_soon_threadsafe(_settle, flushed, ok)
        )
        try:
            async with asyncio.timeout(timeout_ms / 1000):
                synced = await flushed
        except TimeoutError:
            return ErrorCode.request_timed_out
        partition.wake_waiters()
        return ErrorCode.none if synced else ErrorCode.kafka_storage_error

    def _follower_fetched(self, partition: Partition, replica: int, offset: int) -> None:
        state = partition.leader_state
        if state is None:
            return
        now = self._clock.monotonic_ms()
        state.follower_fetched(replica, offset, partition.log.log_end_offset, now)
        self._advance_high_watermark(partition)
        self._propose_isr(partition, now)

    def _advance_high_watermark(self, partition: Partition) -> None:
        state = partition.leader_state
        if state is None:
            return
        candidate = state.high_watermark(partition.log.log_end_offset)
        if candidate > partition.log.high_watermark:
            partition.log.update_high_watermark(candidate)
            partition.complete_produces()
            partition.wake_waiters()

    def _propose_isr(self, partition: Partition, now_ms: int) -> None:
        state = partition.leader_state
        if state is None or self.on_isr_proposal is None:
            return
        proposed = state.isr_to_propose(
            partition.log.high_watermark, now_ms, self.replica_lag_time_max_ms
        )
        if proposed is not None:
            state.pending_isr = proposed
            self.on_isr_proposal(partition, proposed)

    def check_isr(self) -> None:
        """Propose ISR shrinks for followers that fell behind (run every second or so)."""
        now = self._clock.monotonic_ms()
        for partition in self.partitions.values():
            if partition.leader_state is not None and partition.is_leader:
                self._propose_isr(partition, now)

    def isr_answered(
        self, partition: Partition, isr: frozenset[int] | None, partition_epoch: int
    ) -> None:
        """The controller's answer to a proposal: the ISR it now has (None: refused)."""
        state = partition.leader_state
        if state is None:
            return
        state.pending_isr = None
        if isr is not None and partition_epoch >= state.partition_epoch:
            state.isr, state.partition_epoch = isr, partition_epoch
        self._advance_high_watermark(partition)

    # ---- fetch --------------------------------------------------------------------------------

    async def fetch(
        self,  # the results' file slices are the caller's: `release` them once sent
        requests: Sequence[FetchRequestPartition],
        *,
        max_wait_ms: int,
        min_bytes: int,
        max_bytes: int,
        replica_id: int = -1,
        from_followers: bool = False,
        read_committed: bool = False,
    ) -> list[FetchResult]:
        """Read every requested partition; wait up to `max_wait_ms` for `min_bytes` in all.
        `read_committed` reads stop at the last stable offset and name the aborted
        transactions of the range read.
        A follower (`replica_id` >= 0) reads up to the log end, and its fetch offsets tell the
        leader how far it has replicated. With `from_followers` (a consumer's Fetch v11+,
        KIP-392) partitions this broker follows are served too, up to their high watermark."""
        deadline = self._clock.monotonic_ms() + max_wait_ms
        while True:
            results = self._read_all(requests, max_bytes, replica_id, from_followers,
                                     read_committed)  # fmt: skip
            available = sum(r.data.size for r in results if r.data is not None)
            errors = any(r.error != ErrorCode.none for r in results)
            remaining = deadline - self._clock.monotonic_ms()
            if available >= min_bytes or errors or remaining <= 0 or not requests:
                return results
            release(results)
            await self._wait_for_data(requests, remaining)

    def _read_all(
        self,
        requests: Sequence[FetchRequestPartition],
        max_bytes: int,
        replica_id: int = -1,
        from_followers: bool = False,
        read_committed: bool = False,
    ) -> list[FetchResult]:
        results = []
        budget = max_bytes
        for request in requests:
            result = self._read_one(
                request, budget, min_one_batch=budget == max_bytes, replica_id=replica_id,
                from_followers=from_followers, read_committed=read_committed,
            )  # fmt: skip
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
        self,
        request: FetchRequestPartition,
        budget: int,
        *,
        min_one_batch: bool,
        replica_id: int = -1,
        from_followers: bool = False,
        read_committed: bool = False,
    ) -> FetchResult:
        partition = self.partitions.get((request.topic, request.partition))
        follower_read = (
            from_followers
            and replica_id < 0
            and partition is not None
            and not partition.is_leader
            and partition.log.offline_reason is None
        )
        if partition is None or not (partition.serving or follower_read):
            error = self._missing_or_offline(request.topic, request.partition).error
            return FetchResult(request.topic, request.partition, error)
        current = request.current_leader_epoch
        if 0 <= current < partition.leader_epoch:
            return FetchResult(request.topic, request.partition, ErrorCode.fenced_leader_epoch)
        if current > partition.leader_epoch:
            return FetchResult(request.topic, request.partition, ErrorCode.unknown_leader_epoch)
        limit = min(budget, request.max_bytes)
        bound = None
        if replica_id >= 0:
            if partition.leader_state is None or replica_id not in partition.leader_state.replicas:
                return FetchResult(
                    request.topic, request.partition, ErrorCode.not_leader_or_follower
                )
            bound = partition.log.log_end_offset
            if request.offset <= bound:
                self._follower_fetched(partition, replica_id, request.offset)
        elif read_committed:
            bound = partition.last_stable_offset
        try:
            info = partition.log.read(
                request.offset, limit, min_one_batch=min_one_batch, retain=True, max_offset=bound
            )
        except LogDirectoryError:
            return FetchResult(request.topic, request.partition, ErrorCode.kafka_storage_error)
        except OffsetOutOfRangeError:
            partition_log = partition.log
            if follower_read and request.offset > partition_log.log_end_offset and current < 0:
                # A consumer that gives no leader epoch may be here on stale metadata: an
                # empty answer makes it retry (and refresh) rather than reset its position.
                return FetchResult(
                    request.topic,
                    request.partition,
                    ErrorCode.none,
                    partition_log.high_watermark,
                    partition_log.log_start_offset,
                )
            return FetchResult(
                request.topic,
                request.partition,
                ErrorCode.offset_out_of_range,
                partition_log.high_watermark,
                partition_log.log_start_offset,
            )
        data = info.data if limit > 0 or min_one_batch else None
        stable = partition.last_stable_offset
        aborted = None
        if read_committed and bound is not None:
            aborted = _aborted_in(partition, request.offset, data)
        return FetchResult(
            request.topic,
            request.partition,
            ErrorCode.none,
            info.high_watermark,
            info.log_start_offset,
            data,
            last_stable_offset=stable,
            aborted=aborted,
        )

    def preferred_read_replica(
        self, topic: str, index: int, offset: int, client_rack: str, racks: Mapping[int, str | None]
    ) -> FetchResult | None:
        """For a consumer in `client_rack` fetching a partition this broker leads: an empty
        result naming the in-sync replica in that rack to read from instead (KIP-392), or None
        when it should read here."""
        partition = self.partitions.get((topic, index))
        if partition is None or not partition.serving or partition.leader_state is None:
            return None
        state = partition.leader_state
        chosen = preferred_read_replica(state, offset, client_rack, racks)
        if chosen == state.node_id:
            return None
        return FetchResult(
            topic,
            index,
            ErrorCode.none,
            partition.log.high_watermark,
            partition.log.log_start_offset,
            preferred_read_replica=chosen,
        )

    async def _wait_for_data(
        self, requests: Sequence[FetchRequestPartition], timeout_ms: int
    ) -> None:
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        watched = [p for r in requests if (p := self.partitions.get((r.topic, r.partition)))]
        for partition in watched:
            partition.waiters.append(waiter)
        try:
            async with asyncio.timeout(timeout_ms / 1000):
                await waiter
        except TimeoutError:
            pass
        finally:
            for partition in watched:
                if waiter in partition.waiters:
                    partition.waiters.remove(waiter)

    # ---- offsets ------------------------------------------------------------------------------

    def list_offset(
        self, topic: str, index: int, timestamp: int, *, read_committed: bool = False
    ) -> tuple[ErrorCode, int, int]:
        """(error, offset, timestamp) for ListOffsets: -1 latest (the last stable offset for
        `read_committed`), -2 earliest, -3 max timestamp, else the first offset whose timestamp
        is >= `timestamp` (offset -1 if none)."""
        partition = self.partitions.get((topic, index))
        if partition is None or not partition.serving:
            return self._missing_or_offline(topic, index).error, -1, -1
        partition_log = partition.log
        if timestamp == LATEST_TIMESTAMP:
            if read_committed:
                return ErrorCode.none, partition.last_stable_offset, -1
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


def _aborted_in(
    partition: Partition, offset: int, data: FileSlice | None
) -> tuple[tuple[int, int], ...]:
    """(producer id, first offset) of the aborted transactions with records in the data a
    read_committed fetch returns, from the log's aborted-transaction indexes."""
    if data is None:
        return ()
    txns = partition.log.collect_aborted_txns(offset, data.next_offset)
    return tuple((txn.producer_id, txn.first_offset) for txn in txns)


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


def _settle(future: asyncio.Future[bool], result: bool) -> None:
    if not future.done():
        future.set_result(result)
