"""This broker's replicas: their roles as the controller gives them (LeaderAndIsr and
StopReplica applied here, follower fetchers and the internal topics' coordinators told), and
for the partitions it leads, appends with validation and producer checks, reads for fetch (long
poll without busy loops), offsets by time, and record deletion. Each partition is a `Partition`
(`partition.py`), the owner of its role and high watermark.

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
import contextlib
import functools
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Protocol

from kio.schema.errors import ErrorCode

from weir.broker.delayed import wait_for_data, wait_replicated, wait_synced
from weir.broker.log_validator import check_topic_rules, stored_form
from weir.broker.metrics.stats import BrokerStats
from weir.broker.partition import (
    FOLLOWER,
    OFFLINE,
    IllegalRoleTransitionError,
    Partition,
    PartitionState,
    alone,
)
from weir.broker.producer_state import ProducerStateError, ProducerStateManager
from weir.broker.quota_rate import QuotaWindow
from weir.broker.replication_quota import ReplicationQuotas
from weir.broker.request_times import remote_wait
from weir.broker.results import AppendResult, FetchRequestPartition, FetchResult, release
from weir.clock import Clock
from weir.records import HEADER_SIZE, BatchHeader, RecordError, validate_batch
from weir.storage import LogConfig, LogManager, PartitionLog
from weir.storage.errors import LogDirectoryError, LogWriteError, StorageError

log = logging.getLogger(__name__)

REFUSAL_LOG_INTERVAL_MS = 10_000
#: partitions whose logs are created in one job on the default executor
CREATION_SLICE = 100
#: a topic's log config, as its metadata gives it (read off the loop when not cached)
ConfigSource = Callable[[str], Awaitable[LogConfig]]


class Followers(Protocol):
    """The follower fetchers: one per leader, fetching the partitions this broker follows."""

    def note_leaders(self, leaders: dict[int, tuple[str, int]]) -> None: ...

    def follow(self, partition: Partition, leader: int, leader_epoch: int) -> bool: ...

    def stop_following(self, topic: str, index: int) -> None: ...


class Coordinator(Protocol):
    """A coordinator whose state lives in an internal topic's partitions: it serves those
    this broker leads."""

    def load_partition(self, index: int) -> None: ...

    def unload_partition(self, index: int) -> None: ...


class ReplicaManager:
    """This broker's replicas: a `Partition` per partition it has a log for, each the owner of
    its role and high watermark. The controller's LeaderAndIsr and StopReplica arrive here
    (`become_leader_or_follower`, `stop_replicas`): this manager changes roles, starts and
    stops follower fetchers, and tells the coordinators of `__consumer_offsets` and
    `__transaction_state` of every leadership of theirs gained or lost. A single node leads its
    partitions alone (`lead_alone`): replicas and ISR of itself.

    Thread-safety (docs/threads.md): event-loop only. Logs guard themselves against the storage
    scheduler's
    thread; a flush there reaches a leader's high watermark through the loop."""

    def __init__(
        self,
        log_manager: LogManager,
        clock: Clock,
        *,
        min_free_bytes: int = 0,
        node_id: int = 0,
        replica_lag_time_max_ms: int = 30_000,
    ):
        """Partitions are opened for every log of `log_manager`, with no role until the
        controller (or `lead_alone`) gives them one."""
        self.log_manager = log_manager
        self.node_id = node_id
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        #: called with (partition, proposed ISR) when a leader wants its ISR changed
        self.on_isr_proposal: Callable[[Partition, frozenset[int]], None] | None = None
        #: the follower fetchers (a cluster's); None on a single node
        self.followers: Followers | None = None
        #: internal topic -> the coordinator that serves what its partitions hold
        self.coordinators: dict[str, Coordinator] = {}
        #: the replication throttles (the broker keeps their bounds to its dynamic config)
        self.replication_quotas = ReplicationQuotas(node_id, QuotaWindow())
        #: where bytes and messages in and out and ISR changes are counted; None: not counted
        self.stats: BrokerStats | None = None
        self._clock = clock
        self._loop = _running_loop()
        self._min_free_bytes = min_free_bytes
        self._last_refusal_log: dict[tuple[str, int], int] = {}
        self.partitions: dict[tuple[str, int], Partition] = {}
        for (topic, index), partition_log in log_manager:
            self._adopt(topic, index, partition_log)

    def now_ms(self) -> int:
        """The monotonic clock replication is timed by."""
        return self._clock.monotonic_ms()

    # ---- partitions ---------------------------------------------------------------------------

    def _adopt(self, topic: str, index: int, partition_log: PartitionLog) -> Partition:
        partition = self._loaded(topic, index, partition_log)
        self.partitions[(topic, index)] = partition
        return partition

    def _loaded(self, topic: str, index: int, partition_log: PartitionLog) -> Partition:
        """A partition on its log with its producer state loaded, no role yet. Touches
        nothing shared: callable from a storage thread."""
        partition = Partition(topic, index, partition_log, ProducerStateManager())
        partition.load_producer_state()
        partition_log.on_flushed = functools.partial(self._flushed, partition)
        return partition

    def _flushed(self, partition: Partition) -> None:
        """On the thread that flushed `partition`'s log: its leader's high watermark may move
        (under the flushed policy), on the loop."""
        loop = self._loop
        if loop is None:
            return
        with contextlib.suppress(RuntimeError):  # a closed loop: the broker is stopping
            loop.call_soon_threadsafe(partition.advance_high_watermark)

    @staticmethod
    def reload_producer_state(partition: Partition) -> None:
        """Rebuild producer state from the log (after a truncation)."""
        partition.load_producer_state()

    def become_leader(self, state: PartitionState, config: LogConfig) -> bool:
        """Lead `state`'s partition (its log created if new) with the replicas and ISR the
        controller gave; whether leadership is newly gained here. StorageError if the log
        cannot be created; IllegalRoleTransitionError if the replica is offline."""
        partition = self._ensure(state.topic, state.index, config)
        return partition.make_leader(state, self.node_id, self._clock.monotonic_ms())

    def become_follower(self, state: PartitionState, config: LogConfig) -> Partition:
        """Stop serving `state`'s partition here: another broker leads it."""
        partition = self._ensure(state.topic, state.index, config)
        partition.make_follower(state.leader_epoch)
        return partition

    def lead_alone(self, topic: str, indexes: Iterable[int]) -> None:
        """Lead `indexes` of `topic` as their only replica (a single node's partitions); those
        without a log here or offline are left as they are."""
        for index in indexes:
            partition = self.partitions.get((topic, index))
            if partition is not None and partition.role is not OFFLINE:
                state = alone(topic, index, self.node_id)
                self._gained(topic, index, self.become_leader(state, partition.log.config))

    async def become_leader_or_follower(
        self,
        states: Sequence[PartitionState],
        config_of: ConfigSource,
        *,
        live_leaders: Mapping[int, tuple[str, int]] | None = None,
    ) -> dict[tuple[str, int], ErrorCode]:
        """Apply a LeaderAndIsr: each partition this broker replicates becomes leader or
        follower as `states` say (logs of new replicas created first, off the loop), fetchers
        follow the new leaders, and the coordinators hear of leaderships gained and lost.
        `config_of(topic)` gives a topic's log config. The error of every partition."""
        if live_leaders and self.followers is not None:
            self.followers.note_leaders(dict(live_leaders))
        by_topic: dict[str, list[PartitionState]] = {}
        for state in states:
            by_topic.setdefault(state.topic, []).append(state)
        errors: dict[tuple[str, int], ErrorCode] = {}
        for topic, topic_states in by_topic.items():
            await self._open_new_replicas(topic, topic_states, config_of)
            for state in topic_states:
                errors[(topic, state.index)] = await self._apply(state, config_of)
        return errors

    async def _open_new_replicas(
        self, topic: str, states: Sequence[PartitionState], config_of: ConfigSource
    ) -> None:
        """Create the logs of this broker's replicas of `topic` it has none for yet; one that
        cannot be created is left to `_apply`, which reports it."""
        mine = [s.index for s in states if self.node_id in s.replicas]
        new = [index for index in mine if self.get(topic, index) is None]
        if not new:
            return
        try:
            config = await config_of(topic)
            for start in range(0, len(new), CREATION_SLICE):
                await self.open_partitions(topic, new[start : start + CREATION_SLICE], config)
        except Exception as exc:  # a storage failure, or a config this broker cannot apply
            log.warning("%s: new replicas' logs not created ahead: %s", topic, exc)

    async def _apply(self, state: PartitionState, config_of: ConfigSource) -> ErrorCode:
        if self.node_id not in state.replicas:
            return ErrorCode.none
        current = self.get(state.topic, state.index)
        if current is not None and state.leader_epoch < current.leader_epoch:
            log.warning("%s-%d: ignoring leader epoch %d, older than %d", state.topic,
                        state.index, state.leader_epoch, current.leader_epoch)  # fmt: skip
            return ErrorCode.stale_controller_epoch
        try:
            config = await config_of(state.topic)
            if state.leader == self.node_id:
                self._stop_following(state.topic, state.index)
                self._gained(state.topic, state.index, self.become_leader(state, config))
            else:
                self._follow(state, self.become_follower(state, config))
        except (StorageError, IllegalRoleTransitionError) as exc:
            log.error("%s-%d: no log: %s", state.topic, state.index, exc)
            return ErrorCode.kafka_storage_error
        except Exception as exc:  # a config this broker cannot apply: the partition is refused
            log.error("%s-%d: %s", state.topic, state.index, exc)
            return ErrorCode.unknown_server_error
        return ErrorCode.none

    def _follow(self, state: PartitionState, partition: Partition) -> None:
        self._lost(state.topic, state.index)
        if state.leader >= 0 and self.followers is not None:
            self.followers.follow(partition, state.leader, state.leader_epoch)
        else:
            self._stop_following(state.topic, state.index)

    def _stop_following(self, topic: str, index: int) -> None:
        if self.followers is not None:
            self.followers.stop_following(topic, index)

    def _gained(self, topic: str, index: int, gained: bool) -> None:
        coordinator = self.coordinators.get(topic)
        if gained and coordinator is not None:
            coordinator.load_partition(index)

    def _lost(self, topic: str, index: int) -> None:
        coordinator = self.coordinators.get(topic)
        if coordinator is not None:
            coordinator.unload_partition(index)

    def stop_replicas(
        self, partitions: Sequence[tuple[str, int, bool]]
    ) -> dict[tuple[str, int], ErrorCode]:
        """Apply a StopReplica: stop fetching and serving each (topic, index, delete), delete
        its log if `delete`, and have the coordinators forget what it held. The error of
        every partition."""
        errors: dict[tuple[str, int], ErrorCode] = {}
        for topic, index, delete in partitions:
            self._stop_following(topic, index)
            try:
                self.stop_replica(topic, index, delete=delete)
                errors[(topic, index)] = ErrorCode.none
            except StorageError:
                errors[(topic, index)] = ErrorCode.kafka_storage_error
            self._lost(topic, index)
        return errors

    def stop_replica(self, topic: str, index: int, *, delete: bool) -> None:
        partition = self.partitions.get((topic, index))
        if partition is None:
            if delete and (topic, index) in self.log_manager.offline_partitions:
                self._delete_log(topic, index)
            return
        if partition.role is not OFFLINE:
            partition.stop()
        if delete:
            del self.partitions[(topic, index)]
            self._delete_log(topic, index)

    def _delete_log(self, topic: str, index: int) -> None:
        """The log taken out at once (closed, its directory renamed), its files deleted on the
        default executor, so that the loop never waits on the disk for them."""
        detached = self.log_manager.detach_many([(topic, index)])
        loop = _running_loop()
        if loop is None:
            self.log_manager.remove_detached(detached)
            return
        removal = loop.run_in_executor(None, self.log_manager.remove_detached, detached)
        removal.add_done_callback(_log_removal_failure)

    def _ensure(self, topic: str, index: int, config: LogConfig) -> Partition:
        partition = self.partitions.get((topic, index))
        if partition is not None:
            return partition
        self.log_manager.set_topic_config(topic, config)
        return self._adopt(topic, index, self.log_manager.get_or_create(topic, index))

    def create_partitions(self, topic: str, count: int, config: LogConfig) -> None:
        """Logs for partitions 0..count-1 of `topic`, led here alone (a single node's).
        StorageError if one cannot be created (those before it stay); one in an offline
        directory is skipped, offline."""
        self.log_manager.set_topic_config(topic, config)
        for index in range(count):
            if (topic, index) in self.partitions or self.is_offline(topic, index):
                continue
            self._adopt(topic, index, self.log_manager.get_or_create(topic, index))
        self.lead_alone(topic, range(count))

    async def open_partitions(self, topic: str, indexes: Sequence[int], config: LogConfig) -> None:
        """Logs for `indexes` of `topic` (those not here yet), created on the default executor
        so that the loop never waits on their files; they have no role until given one.
        StorageError if one cannot be created; those opened before it stay (the caller removes
        them)."""
        self.log_manager.set_topic_config(topic, config)
        wanted = [i for i in indexes if not self._known(topic, i)]
        loop = asyncio.get_running_loop()
        self._loop = loop
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
            return partition.role is OFFLINE
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
            missing = self._missing_or_offline(topic, index)
            if partition is not None and missing.error is ErrorCode.not_leader_or_follower:
                _refuse_if_in_sequence(partition, records, missing)
            return missing
        if not records:
            return AppendResult(ErrorCode.corrupt_message, message="no record batch")
        config = partition.log.config
        try:
            header = validate_batch(records, max_message_bytes=config.max_message_bytes)
            name = f"{topic}-{index}"
            check_topic_rules(header, config, name, self._clock.milliseconds())
        except RecordError as exc:
            return AppendResult(
                ErrorCode(exc.error_code), message=str(exc), record_errors=exc.record_errors
            )
        refused = partition.check_append(header, acks)
        if refused is not None:
            return refused
        if not reserve_exempt:
            shortfall = self.log_manager.free_space_shortfall(topic, index, self._min_free_bytes)
            if shortfall is not None:
                return partition.refuse_in_sequence(
                    header.fields(), self._refuse(partition, shortfall)
                )
        if header.is_transactional:
            try:
                partition.log.note_transactions()
            except OSError as exc:
                refused = self._refuse(partition, f"cannot record transactions: {exc}")
                return partition.refuse_in_sequence(header.fields(), refused)
        stored = stored_form(records, header, config)
        result = self._append_validated(partition, stored, defer_sync=acks != 1)
        if self.stats is not None and result.error is ErrorCode.none:
            self.stats.appended(topic, index, len(records), header.records_count)
        return result

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

    def leader_error(self, topic: str, index: int, current_leader_epoch: int = -1) -> ErrorCode:
        """NONE if this broker leads `topic-index` (in `current_leader_epoch`, if one is
        named), else what a request for that partition is answered: UNKNOWN_TOPIC_OR_PARTITION,
        KAFKA_STORAGE_ERROR (offline here), NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH or
        UNKNOWN_LEADER_EPOCH."""
        partition = self.partitions.get((topic, index))
        if partition is None or not partition.serving:
            return self._missing_or_offline(topic, index).error
        return partition.leader_epoch_error(current_leader_epoch)

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
        partition.advance_high_watermark()
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
        return not partition.replicated(end_offset) or partition.log.awaits_sync(end_offset)

    async def wait_replicated(
        self, topic: str, index: int, end_offset: int, timeout_ms: int
    ) -> ErrorCode:
        """For acks=all: wait until every ISR member has the records before `end_offset`,
        then check the ISR is still large enough."""
        partition = self.partitions.get((topic, index))
        if partition is None or not partition.is_leader:
            return ErrorCode.not_leader_or_follower
        error = await wait_replicated(partition, end_offset, timeout_ms)
        if error is ErrorCode.none and partition.log.awaits_sync(end_offset):
            return await wait_synced(partition, end_offset, timeout_ms)
        return error

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
            if partition.is_leader:
                self._propose_isr(partition, now)

    def isr_answered(
        self, partition: Partition, isr: frozenset[int] | None, partition_epoch: int
    ) -> None:
        """The controller's answer to a proposal: the ISR it now has (None: refused)."""
        before = partition.isr_size
        partition.isr_answered(isr, partition_epoch)
        if self.stats is not None:
            self.stats.isr_changed(before, partition.isr_size)

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
                if replica_id >= 0 and self.replication_quotas.leader.enabled:
                    self._record_throttled(results, replica_id)
                if self.stats is not None:
                    sizes = [(r.topic, r.partition, r.data.size)
                             for r in results if r.data is not None]  # fmt: skip
                    self.stats.fetched(sizes, by_follower=replica_id >= 0)
                return results
            release(results)
            watched = [p for r in requests if (p := self.get(r.topic, r.partition))]
            with remote_wait():
                await wait_for_data(watched, remaining, follower=replica_id >= 0)

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

    def _record_throttled(self, results: Sequence[FetchResult], replica_id: int) -> None:
        """Count what a follower's fetch sends of the partitions the leader throttle holds."""
        quota = self.replication_quotas.leader
        sent = 0
        for result in results:
            partition = self.partitions.get((result.topic, result.partition))
            if result.data is None or partition is None:
                continue
            if quota.applies(partition.log.config, partition.index, partition.in_sync(replica_id)):
                sent += result.data.size
        quota.record(sent, self._clock.monotonic_ms())

    def _take_offline(self, partition: Partition, exc: Exception) -> None:
        self.log_manager.take_offline(partition.topic, partition.index, str(exc))
        partition.log.take_offline(str(exc))
        for other in self.partitions.values():
            if other.role is OFFLINE:
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
        follower_read = from_followers and replica_id < 0
        if partition is None or not (partition.serving or (follower_read and
                                     partition.role is FOLLOWER)):  # fmt: skip
            error = self._missing_or_offline(request.topic, request.partition).error
            return FetchResult(request.topic, request.partition, error)
        now = self._clock.monotonic_ms()
        if replica_id >= 0 and self.replication_quotas.leader.holds(
            partition.log.config, partition.index, partition.in_sync(replica_id), now
        ):
            budget, min_one_batch = 0, False  # its offset still counts; no records
        result = partition.fetch_records(
            request, min(budget, request.max_bytes), min_one_batch=min_one_batch,
            replica_id=replica_id, read_committed=read_committed, now_ms=now,
        )  # fmt: skip
        if replica_id >= 0 and result.error is ErrorCode.none:
            self._propose_isr(partition, now)
        return result

    def preferred_read_replica(
        self, topic: str, index: int, offset: int, client_rack: str, racks: Mapping[int, str | None]
    ) -> FetchResult | None:
        """For a consumer in `client_rack` fetching a partition this broker leads: an empty
        result naming the in-sync replica in that rack to read from instead (KIP-392), or None
        when it should read here."""
        partition = self.partitions.get((topic, index))
        if partition is None or not partition.serving:
            return None
        return partition.preferred_read_replica(offset, client_rack, racks)

    # ---- offsets ------------------------------------------------------------------------------

    def list_offset(
        self, topic: str, index: int, timestamp: int, *, read_committed: bool = False,
        client: bool = False,
    ) -> tuple[ErrorCode, int, int]:  # fmt: skip
        """(error, offset, timestamp) for ListOffsets: -1 latest (the last stable offset for
        `read_committed`), -2 earliest, -3 max timestamp, else the first offset whose timestamp
        is >= `timestamp` (offset -1 if none); `client`: see `Partition.offset_for`."""
        partition = self.partitions.get((topic, index))
        if partition is None or not partition.serving:
            return self._missing_or_offline(topic, index).error, -1, -1
        return partition.offset_for(timestamp, read_committed=read_committed, client=client)

    def delete_records(self, topic: str, index: int, offset: int) -> tuple[ErrorCode, int]:
        """Move the log start offset to `offset` (-1: the high watermark).
        Returns (error, low watermark)."""
        partition = self.partitions.get((topic, index))
        if partition is None or not partition.serving:
            return self._missing_or_offline(topic, index).error, -1
        try:
            return partition.delete_records(offset)
        except LogDirectoryError as exc:
            self._take_offline(partition, exc)
            return ErrorCode.none, partition.log.log_start_offset


def _log_removal_failure(removal: asyncio.Future[None]) -> None:
    if not removal.cancelled() and removal.exception() is not None:
        log.warning("deleting a stopped replica's files failed: %r", removal.exception())


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _refuse_if_in_sequence(
    partition: Partition, records: bytes | None, refused: AppendResult
) -> None:
    """A follower refusing a producer's batch that is next in that producer's sequence (as far
    as its replicated producer state knows) remembers it, as a leader does: it may lead before
    the batches pipelined behind it arrive (`Partition.refuse_in_sequence`)."""
    if not records or len(records) < HEADER_SIZE:
        return
    fields = BatchHeader(records).fields()
    if fields.magic != 2:
        return
    try:
        if partition.producers.check(fields) is None:
            partition.refuse_in_sequence(fields, refused)
    except ProducerStateError:
        pass
