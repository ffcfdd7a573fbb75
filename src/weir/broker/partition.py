"""One partition's replica on this broker: its log, producer state, waiting fetches and
produces, and its role, the one owner of its high watermark (Kafka's `Partition`).

The role is a state machine (`TRANSITIONS`); a transition the table lacks raises:

    New ──> Leader / Follower / Stopped     (the controller's LeaderAndIsr or StopReplica)
    Leader <──> Follower, either ──> Stopped, Stopped ──> Leader / Follower
    any ──> Offline                          (its log directory failed; until a restart)

The high watermark moves in one place per role:

- the leader's, in `advance_high_watermark`: the smallest log end offset over the ISR (its own
  included, bounded by the flushed offset under `high.watermark.policy=flushed`), after an
  append, a follower's fetch, a flush or an ISR change. A single node leads its partitions with
  replicas and ISR of itself, so there the high watermark follows its own log end offset by
  the same rule;
- a follower's, in `follow_leader_high_watermark`: the leader's, from a fetch response, bounded
  by its own log end.

The log stores the high watermark it is given and never moves it forward by itself.

Thread-safety (docs/threads.md): event-loop only. The log guards itself against the storage
scheduler's thread;
a log directory that fails there shows here as the Offline role.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from kio.schema.errors import ErrorCode

from weir.broker.producer_state import ProducerStateError, ProducerStateManager
from weir.broker.replication import LeaderState, preferred_read_replica
from weir.broker.results import AppendResult, FetchRequestPartition, FetchResult
from weir.records import BatchHeader, HeaderFields
from weir.storage import FileSlice, OffsetOutOfRangeError, PartitionLog
from weir.storage.config import HW_FLUSHED
from weir.storage.errors import LogDirectoryError

log = logging.getLogger(__name__)

#: the leader epoch a partition starts with (a single node's, for ever)
LEADER_EPOCH = 0
ACKS_ALL = -1
#: ListOffsets' special timestamps
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3

#: producers whose refused next batch a partition remembers (see `refuse_in_sequence`)
MAX_REFUSED_HEADS = 1024

#: a waiting produce's answer given its end offset, or None while it still waits
_Answer = Callable[[int], ErrorCode | None]


class ReplicaRole(enum.Enum):
    NEW = "New"  # its log is open; the controller has not given it a role yet
    LEADER = "Leader"
    FOLLOWER = "Follower"
    STOPPED = "Stopped"
    OFFLINE = "Offline"


NEW = ReplicaRole.NEW
LEADER = ReplicaRole.LEADER
FOLLOWER = ReplicaRole.FOLLOWER
STOPPED = ReplicaRole.STOPPED
OFFLINE = ReplicaRole.OFFLINE

TRANSITIONS = MappingProxyType({
    NEW: frozenset({LEADER, FOLLOWER, STOPPED, OFFLINE}),
    LEADER: frozenset({LEADER, FOLLOWER, STOPPED, OFFLINE}),
    FOLLOWER: frozenset({LEADER, FOLLOWER, STOPPED, OFFLINE}),
    STOPPED: frozenset({LEADER, FOLLOWER, STOPPED, OFFLINE}),
    OFFLINE: frozenset({OFFLINE}),
})  # fmt: skip


class IllegalRoleTransitionError(Exception):
    pass


def check_transition(current: ReplicaRole, target: ReplicaRole) -> None:
    if target not in TRANSITIONS[current]:
        raise IllegalRoleTransitionError(f"a replica cannot go from {current.value} to "
                                         f"{target.value}")  # fmt: skip


@dataclass(frozen=True, slots=True)
class PartitionState:
    """One partition as the controller's LeaderAndIsr states it."""

    topic: str
    index: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    #: the controller's version of the partition's state (zkVersion)
    partition_epoch: int = 0


@dataclass(slots=True)
class Partition:
    """A replica of `topic-index` here. Thread-safety (docs/threads.md): event-loop only (see
    the module)."""

    topic: str
    index: int
    log: PartitionLog
    producers: ProducerStateManager
    leader_epoch: int = LEADER_EPOCH
    _role: ReplicaRole = NEW
    #: fetches waiting for anything new here: records, a high watermark move, a role change
    waiters: list[asyncio.Future[None]] = field(default_factory=list)
    #: followers' fetches waiting here: they read to the log end, so only records (or a role
    #: change) are news to them, never a high watermark move
    follower_waiters: list[asyncio.Future[None]] = field(default_factory=list)
    #: the followers and ISR, while this broker leads the partition (None otherwise)
    leader_state: LeaderState | None = None
    #: the leader's high watermark as this follower's last fetch gave it (-1: none yet)
    leader_high_watermark: int = -1
    #: acks=all produces waiting for the ISR to reach their end offset
    produce_waiters: list[tuple[int, asyncio.Future[ErrorCode]]] = field(default_factory=list)
    #: producer id -> (epoch, base sequence, error) of its next batch in sequence, refused here
    #: unwritten; forgotten when one of its batches is appended (see `refuse_in_sequence`)
    _refused_heads: dict[int, tuple[int, int, ErrorCode]] = field(default_factory=dict)

    # ---- role ---------------------------------------------------------------------------------

    @property
    def role(self) -> ReplicaRole:
        if self.log.offline_reason is not None and self._role is not OFFLINE:
            self._become(OFFLINE)  # its directory failed, perhaps on the storage thread
        return self._role

    def _become(self, target: ReplicaRole) -> None:
        check_transition(self._role, target)
        self._role = target

    @property
    def is_leader(self) -> bool:
        return self.role is LEADER

    @property
    def serving(self) -> bool:
        """Whether clients may produce to and fetch from it here."""
        return self.role is LEADER

    def make_leader(self, state: PartitionState, node_id: int, now_ms: int) -> bool:
        """Lead from `state.leader_epoch` on with its replicas and ISR (a partition epoch newer
        than the one led under only updates the ISR). Whether leadership is newly gained here.
        IllegalRoleTransitionError if the replica is offline."""
        current = self.leader_state
        if self.role is LEADER and self.leader_epoch == state.leader_epoch and current:
            if state.partition_epoch > current.partition_epoch:  # the controller changed the ISR
                current.isr, current.partition_epoch = frozenset(state.isr), state.partition_epoch
                current.pending_isr = None
                self.advance_high_watermark()
            return False
        gained = self.role is not LEADER
        self._become(LEADER)
        self.leader_epoch = state.leader_epoch
        self.record_leader_epoch()
        self.leader_state = LeaderState(
            node_id=node_id,
            replicas=state.replicas or (node_id,),
            isr=frozenset(state.isr) | {node_id},
            partition_epoch=state.partition_epoch,
            epoch_start_offset=self.log.log_end_offset,
            started_ms=now_ms,
        )
        self.advance_high_watermark()
        return gained

    def make_follower(self, leader_epoch: int) -> None:
        """Another broker leads from `leader_epoch` on: produces waiting here are refused."""
        self._become(FOLLOWER)
        self.leader_epoch = leader_epoch
        self._resign()

    def stop(self) -> None:
        """Neither lead nor follow here any more (StopReplica)."""
        self._become(STOPPED)
        self._resign()

    def _resign(self) -> None:
        self.leader_state = None
        self.complete_produces(ErrorCode.not_leader_or_follower)
        self.wake_waiters()

    def record_leader_epoch(self) -> None:
        try:
            self.log.assign_leader_epoch(self.leader_epoch)
        except OSError as exc:  # the first append assigns it, or refuses while the disk is full
            log.warning("%s-%d: leader epoch not recorded yet: %s", self.topic, self.index, exc)

    # ---- the high watermark -------------------------------------------------------------------

    def advance_high_watermark(self) -> None:
        """The leader's one way to move the high watermark: up to what every ISR member has
        (and, under the flushed policy, what this broker has fsynced). Answers the acks=all
        produces the ISR has reached and wakes waiting fetches when it moves."""
        state = self.leader_state
        if state is None:
            return
        candidate = replicated = state.high_watermark(self.log.log_end_offset)
        if self.log.config.high_watermark_policy == HW_FLUSHED:
            candidate = min(candidate, self.log.recovery_point)
        moved = candidate > self.log.high_watermark
        if moved:
            self.log.update_high_watermark(candidate)
        # the produces first: their answers go out before the fetches woken here are served
        self._complete_replicated(replicated)
        if moved:
            _wake(self.waiters)
            self.waiters = []

    def follower_fetched(self, replica: int, offset: int, now_ms: int) -> None:
        """A fetch from follower `replica` at `offset`, its log end offset."""
        state = self.leader_state
        if state is None:
            return
        state.follower_fetched(replica, offset, self.log.log_end_offset, now_ms)
        self.advance_high_watermark()

    def isr_answered(self, isr: frozenset[int] | None, partition_epoch: int) -> None:
        """The controller's answer to this leader's ISR proposal: the ISR it now has (None:
        refused)."""
        state = self.leader_state
        if state is None:
            return
        state.pending_isr = None
        if isr is not None and partition_epoch >= state.partition_epoch:
            state.isr, state.partition_epoch = isr, partition_epoch
        self.advance_high_watermark()

    def follow_leader_high_watermark(self, leader_high_watermark: int) -> None:
        """The follower's one way to move the high watermark: to the leader's, as a fetch
        response gave it, bounded by this replica's log end."""
        if self.role is not FOLLOWER:
            return
        self.leader_high_watermark = leader_high_watermark
        self.log.update_high_watermark(min(leader_high_watermark, self.log.log_end_offset))

    def replicated(self, end_offset: int) -> bool:
        """Whether every ISR member has the records before `end_offset` (what acks=all waits
        for); True when this broker does not lead the partition (the waiter is answered
        elsewhere)."""
        state = self.leader_state
        if state is None:
            return True
        return self._replicated_offset(state) >= end_offset

    def _replicated_offset(self, state: LeaderState) -> int:
        return max(self.log.high_watermark, state.high_watermark(self.log.log_end_offset))

    def in_sync(self, replica: int) -> bool:
        """Whether `replica` is in the ISR of this partition, led here."""
        state = self.leader_state
        return state is not None and replica in state.isr

    @property
    def isr_size(self) -> int:
        state = self.leader_state
        return 0 if state is None else len(state.isr)

    @property
    def last_stable_offset(self) -> int:
        """The high watermark, or the first offset of the oldest open transaction below it:
        read_committed consumers read up to here."""
        high_watermark = self.log.high_watermark
        unstable = self.producers.first_unstable_offset()
        return high_watermark if unstable is None else min(unstable, high_watermark)

    # ---- waiting produces and fetches ---------------------------------------------------------

    def wake_waiters(self) -> None:
        """Wake every waiting fetch, followers' included (records arrived, or the role
        changed)."""
        waiters, self.waiters = self.waiters, []
        followers, self.follower_waiters = self.follower_waiters, []
        _wake(followers)
        _wake(waiters)

    def complete_produces(self, error: ErrorCode | None = None) -> None:
        """Answer acks=all produces: those the ISR has reached, or all of them with `error`
        (leadership lost)."""
        if error is not None:
            self._answer_produces(lambda _end: error)
        elif self.leader_state is not None:
            self._complete_replicated(self._replicated_offset(self.leader_state))

    def _complete_replicated(self, replicated: int) -> None:
        offset = max(replicated, self.log.high_watermark)
        self._answer_produces(lambda end: ErrorCode.none if end <= offset else None)

    def _answer_produces(self, answer: _Answer) -> None:
        if not self.produce_waiters:
            return
        waiting = []
        for end, future in self.produce_waiters:
            if future.done():
                continue
            error = answer(end)
            if error is None:
                waiting.append((end, future))
            else:
                future.set_result(error)
        self.produce_waiters = waiting

    # ---- appends ------------------------------------------------------------------------------

    def check_append(self, header: BatchHeader, acks: int) -> AppendResult | None:
        """What this leader answers a validated batch instead of appending it, or None to
        append it: a retry of a batch already in the log, too short an ISR for acks=all, or
        the producer's state refusing it, in Kafka's order."""
        duplicate, producer_error = None, None
        try:
            duplicate = self.producers.check(header.fields())
        except ProducerStateError as exc:
            producer_error = exc
        if duplicate is not None:
            # A retry of a batch already in the log: answered as the original is, once it is
            # replicated (acks=all then waits, and reports a short ISR as
            # NOT_ENOUGH_REPLICAS_AFTER_APPEND). Never NOT_ENOUGH_REPLICAS, which tells the
            # producer the batch was not written: it would send it again under a new epoch.
            end = duplicate.last_offset + 1
            return AppendResult(ErrorCode.none, duplicate.first_offset, -1,
                                self.log.log_start_offset, end_offset=end)  # fmt: skip
        min_isr = self.log.config.min_insync_replicas
        if acks == ACKS_ALL and min_isr > self.isr_size:
            message = (
                f"The size of the current ISR {self.isr_size} is insufficient to satisfy the "
                f"min.isr requirement of {min_isr} for partition {self.topic}-{self.index}"
            )
            refused = AppendResult(ErrorCode.not_enough_replicas, message=message)
            if producer_error is None:
                self.refuse_in_sequence(header.fields(), refused)
            return refused
        if producer_error is not None:
            # after the ISR check, as Kafka orders them: a producer whose earlier batch was
            # refused for a short ISR gets the same answer for the batches it had pipelined
            # behind it, not OUT_OF_ORDER_SEQUENCE_NUMBER (which makes librdkafka bump its
            # epoch and resend batches that may already be written)
            behind = self._behind_refused_head(header.fields(), producer_error)
            if behind is not None:
                return behind
            return AppendResult(ErrorCode(producer_error.error_code), message=str(producer_error))
        return None

    def refuse_in_sequence(self, fields: HeaderFields, refused: AppendResult) -> AppendResult:
        """Note that a batch in its producer's sequence was refused unwritten (`refused`, a
        retriable error) and return that answer. The batches the producer pipelined behind it
        get the same answer until it comes again, even if what refused it has changed
        meanwhile (the ISR grew back): OUT_OF_ORDER_SEQUENCE_NUMBER would make librdkafka
        renumber every batch it has not had answered, on all partitions, under a new epoch,
        and so write again those that were written but not yet acknowledged."""
        if fields.producer_id >= 0 and fields.base_sequence >= 0:
            heads = self._refused_heads
            heads.pop(fields.producer_id, None)
            if len(heads) >= MAX_REFUSED_HEADS:
                del heads[next(iter(heads))]
            heads[fields.producer_id] = (fields.producer_epoch, fields.base_sequence,
                                         refused.error)  # fmt: skip
        return refused

    def _behind_refused_head(
        self, fields: HeaderFields, error: ProducerStateError
    ) -> AppendResult | None:
        head = self._refused_heads.get(fields.producer_id)
        if head is None or error.expected_sequence is None:
            return None
        epoch, sequence, code = head
        if epoch != fields.producer_epoch or sequence != error.expected_sequence:
            return None
        message = (f"sequence {fields.base_sequence} waits for sequence {sequence} of producer "
                   f"{fields.producer_id}, refused with {code.name.upper()}")  # fmt: skip
        return AppendResult(code, message=message)

    # ---- reads --------------------------------------------------------------------------------

    def fetch_records(
        self,
        request: FetchRequestPartition,
        limit: int,
        *,
        min_one_batch: bool,
        replica_id: int,
        read_committed: bool,
        now_ms: int,
    ) -> FetchResult:
        """One partition of a Fetch served here, up to `limit` bytes (Kafka's
        `Partition.fetchRecords`): leader epochs checked (KIP-320), a follower's (`replica_id`
        >= 0) read to the log end and its fetch offset counted, a consumer's to the high
        watermark (the last stable offset for `read_committed`, with the aborted transactions
        of the range)."""
        error = self.leader_epoch_error(request.current_leader_epoch)
        if error is not ErrorCode.none:
            return FetchResult(request.topic, request.partition, error)
        bound = None
        if replica_id >= 0:
            state = self.leader_state
            if state is None or replica_id not in state.replicas:
                return FetchResult(request.topic, request.partition,
                                   ErrorCode.not_leader_or_follower)  # fmt: skip
            bound = self.log.log_end_offset
            if request.offset <= bound:
                self.follower_fetched(replica_id, request.offset, now_ms)
        elif read_committed:
            bound = self.last_stable_offset
        try:
            info = self.log.read(request.offset, limit, min_one_batch=min_one_batch, retain=True,
                                 max_offset=bound)  # fmt: skip
        except LogDirectoryError:
            return FetchResult(request.topic, request.partition, ErrorCode.kafka_storage_error)
        except OffsetOutOfRangeError:
            return self._out_of_range(request)
        data = info.data if limit > 0 or min_one_batch else None
        aborted = None
        if read_committed and bound is not None:
            aborted = self._aborted_in(request.offset, data)
        return FetchResult(request.topic, request.partition, ErrorCode.none, info.high_watermark,
                           info.log_start_offset, data, last_stable_offset=self.last_stable_offset,
                           aborted=aborted)  # fmt: skip

    def leader_epoch_error(self, current: int) -> ErrorCode:
        """What a request naming `current` as the leader epoch meets here (KIP-320): an older
        one is fenced, a newer one unknown yet; -1 names none."""
        if 0 <= current < self.leader_epoch:
            return ErrorCode.fenced_leader_epoch
        if current > self.leader_epoch:
            return ErrorCode.unknown_leader_epoch
        return ErrorCode.none

    def _out_of_range(self, request: FetchRequestPartition) -> FetchResult:
        log_ = self.log
        error = ErrorCode.offset_out_of_range
        past_end = request.offset > log_.log_end_offset
        if self.role is FOLLOWER and past_end and request.current_leader_epoch < 0:
            # A consumer that gives no leader epoch may be here on stale metadata: an
            # empty answer makes it retry (and refresh) rather than reset its position.
            error = ErrorCode.none
        return FetchResult(request.topic, request.partition, error, log_.high_watermark,
                           log_.log_start_offset)  # fmt: skip

    def _aborted_in(self, offset: int, data: FileSlice | None) -> tuple[tuple[int, int], ...]:
        """(producer id, first offset) of the aborted transactions with records in the data a
        read_committed fetch returns, from the log's aborted-transaction indexes."""
        if data is None:
            return ()
        txns = self.log.collect_aborted_txns(offset, data.next_offset)
        return tuple((txn.producer_id, txn.first_offset) for txn in txns)

    def preferred_read_replica(
        self, offset: int, client_rack: str, racks: Mapping[int, str | None]
    ) -> FetchResult | None:
        """For a consumer in `client_rack` fetching from this leader: an empty result naming
        the in-sync replica in that rack to read from instead (KIP-392), or None when it should
        read here."""
        state = self.leader_state
        if state is None:
            return None
        chosen = preferred_read_replica(state, offset, client_rack, racks)
        if chosen == state.node_id:
            return None
        return FetchResult(self.topic, self.index, ErrorCode.none, self.log.high_watermark,
                           self.log.log_start_offset, preferred_read_replica=chosen)  # fmt: skip

    def offset_for(
        self, timestamp: int, *, read_committed: bool, client: bool = False
    ) -> tuple[ErrorCode, int, int]:
        """(error, offset, timestamp) for ListOffsets (Kafka's
        `Partition.fetchOffsetForTimestamp`): -1 latest (the last stable offset for
        `read_committed`), -2 earliest, -3 max timestamp, else the first offset whose timestamp
        is >= `timestamp` (offset -1 if none below the high watermark).

        A `client`'s request (Kafka: one with an isolation level, v2+) to a leader whose high
        watermark has not yet reached the start of its epoch gets OFFSET_NOT_AVAILABLE, as in
        Kafka: a new leader learns the high watermark from its followers' fetches, and until
        then it would answer an offset behind records already acknowledged."""
        log_ = self.log
        state = self.leader_state
        if client and state is not None and state.epoch_start_offset > log_.high_watermark:
            return ErrorCode.offset_not_available, -1, -1
        if timestamp == LATEST_TIMESTAMP:
            latest = self.last_stable_offset if read_committed else log_.high_watermark
            return ErrorCode.none, latest, -1
        if timestamp == EARLIEST_TIMESTAMP:
            return ErrorCode.none, log_.log_start_offset, -1
        if timestamp == MAX_TIMESTAMP:
            offset, ts = log_.max_timestamp_offset()
            return ErrorCode.none, offset, ts
        if timestamp < 0:
            return ErrorCode.invalid_request, -1, -1
        found = log_.offset_for_timestamp(timestamp)
        if found is None or found[0] >= log_.high_watermark:
            return ErrorCode.none, -1, -1
        return ErrorCode.none, found[0], found[1]

    def delete_records(self, offset: int) -> tuple[ErrorCode, int]:
        """DeleteRecords: the log start offset to `offset` (-1: the high watermark), and the
        whole segments below it deleted if they can be now. (error, low watermark);
        LogDirectoryError if the log's directory failed meanwhile."""
        log_ = self.log
        try:
            log_.increment_log_start_offset(log_.high_watermark if offset == -1 else offset)
        except OffsetOutOfRangeError:
            return ErrorCode.offset_out_of_range, log_.log_start_offset
        try:
            log_.delete_old_segments(retention=False)
        except OSError as exc:
            log.warning("%s-%d: segments below the log start offset kept for now: %s",
                        self.topic, self.index, exc)  # fmt: skip
        return ErrorCode.none, log_.log_start_offset

    # ---- producer state -----------------------------------------------------------------------

    def record_batch(self, fields: HeaderFields, first_offset: int, commit: bool | None) -> None:
        """Producer state after a batch reached the log; an ABORT marker's transaction goes to
        the log's aborted-transaction index. LogDirectoryError if that cannot be written."""
        if self._refused_heads:
            self._refused_heads.pop(fields.producer_id, None)
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


def _wake(waiters: list[asyncio.Future[None]]) -> None:
    for waiter in waiters:
        if not waiter.done():
            waiter.set_result(None)


def alone(topic: str, index: int, node_id: int) -> PartitionState:
    """The state of a partition whose only replica, and so its leader and ISR, is `node_id`
    (every partition of a single node)."""
    return PartitionState(topic, index, node_id, LEADER_EPOCH, (node_id,), (node_id,))
