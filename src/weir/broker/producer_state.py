"""Idempotent producer state of one partition: per producer id, its epoch and its last 5 batches.

A batch from an idempotent producer carries (producer id, epoch, base sequence, count). The
leader accepts it when its sequence follows the last one; answers a retry of one of the last
five batches with that batch's original offsets (nothing is appended twice); and refuses gaps
(OUT_OF_ORDER_SEQUENCE_NUMBER) and old epochs (INVALID_PRODUCER_EPOCH), as Kafka does.
State is snapshotted by the partition's log (`snapshot_entries`, Kafka's `.snapshot` layout,
which keeps each producer's last batch) and restored from the newest snapshot plus the batches
after it when a partition is loaded.

Transactions (KIP-98): a transactional batch opens its producer's transaction on this partition
at its first offset, and the producer's next COMMIT or ABORT marker (a control batch the
coordinator has written) closes it. The first offset of the oldest open transaction bounds the
last stable offset, which read_committed consumers do not read past. An ABORT marker yields the
aborted transaction (producer id, first offset, marker offset, last stable offset), which the
caller writes to the log's aborted-transaction index (`.txnindex`): read_committed fetches read
it from there, so no list of aborted transactions grows here.

Thread-safety (docs/threads.md): none; owned by the broker's event loop.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from weir.records import HeaderFields
from weir.records.batch import CONTROL_BIT, TRANSACTIONAL_BIT
from weir.storage.producer_snapshot import NO_OFFSET, ProducerSnapshotEntry
from weir.storage.txn_index import AbortedTxn

CACHED_BATCHES = 5
#: the base sequence of batches the broker writes for a producer (transactional offset commits)
NO_SEQUENCE = -1
MAX_SEQUENCE = 2**31 - 1

OUT_OF_ORDER_SEQUENCE_NUMBER = 45
INVALID_PRODUCER_EPOCH = 47


class ProducerStateError(Exception):
    def __init__(self, error_code: int, message: str, expected_sequence: int | None = None) -> None:
        super().__init__(message)
        self.error_code = error_code
        #: for a batch ahead of its producer's next sequence (a gap): that next sequence
        self.expected_sequence = expected_sequence


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    first_sequence: int
    last_sequence: int
    first_offset: int
    last_offset: int


@dataclass(slots=True)
class ProducerEntry:
    epoch: int
    #: the largest timestamp of its last batch (DescribeProducers' last_timestamp)
    last_timestamp: int = -1
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=CACHED_BATCHES))


def _last_sequence(fields: HeaderFields) -> int:
    return (fields.base_sequence + fields.last_offset_delta) % (MAX_SEQUENCE + 1)


def _next_sequence(last_sequence: int) -> int:
    return 0 if last_sequence == MAX_SEQUENCE else last_sequence + 1


def _follows(last_sequence: int, first_sequence: int) -> bool:
    return first_sequence == _next_sequence(last_sequence)


class ProducerStateManager:
    def __init__(self) -> None:
        self.producers: dict[int, ProducerEntry] = {}
        #: producer id -> first offset of its open transaction here
        self.ongoing: dict[int, int] = {}

    def first_unstable_offset(self) -> int | None:
        """The first offset of the oldest open transaction; None when none is open."""
        return min(self.ongoing.values()) if self.ongoing else None

    def complete(self, producer_id: int, commit: bool, marker_offset: int) -> AbortedTxn | None:
        """A COMMIT or ABORT marker of `producer_id` at `marker_offset` ends its transaction;
        an aborted one is returned with the last stable offset that follows it."""
        first = self.ongoing.pop(producer_id, None)
        if commit or first is None:
            return None
        unstable = self.first_unstable_offset()
        stable = marker_offset + 1 if unstable is None else unstable
        return AbortedTxn(producer_id, first, marker_offset, stable)

    # ---- snapshots ----------------------------------------------------------------------------

    def snapshot_entries(self) -> list[ProducerSnapshotEntry]:
        """The state as snapshot entries: each producer's epoch, last batch and open
        transaction."""
        return [self._snapshot_entry(pid, entry) for pid, entry in self.producers.items()]

    def _snapshot_entry(self, producer_id: int, entry: ProducerEntry) -> ProducerSnapshotEntry:
        txn_first = self.ongoing.get(producer_id, NO_OFFSET)
        if not entry.batches:
            return ProducerSnapshotEntry(producer_id, entry.epoch, timestamp=entry.last_timestamp,
                                         current_txn_first_offset=txn_first)  # fmt: skip
        last = entry.batches[-1]
        return ProducerSnapshotEntry(
            producer_id, entry.epoch, last.last_sequence, last.last_offset,
            last.last_offset - last.first_offset, entry.last_timestamp,
            current_txn_first_offset=txn_first,
        )  # fmt: skip

    @classmethod
    def restored(cls, entries: Iterable[ProducerSnapshotEntry]) -> ProducerStateManager:
        """The state a snapshot holds (only each producer's last batch is known again)."""
        state = cls()
        for e in entries:
            entry = state.producers[e.producer_id] = ProducerEntry(e.epoch, e.timestamp)
            if e.last_offset >= 0 and e.last_sequence >= 0:
                first_sequence = (e.last_sequence - e.offset_delta) % (MAX_SEQUENCE + 1)
                entry.batches.append(BatchMetadata(
                    first_sequence, e.last_sequence, e.last_offset - e.offset_delta, e.last_offset
                ))  # fmt: skip
            if e.current_txn_first_offset >= 0:
                state.ongoing[e.producer_id] = e.current_txn_first_offset
        return state

    def check(self, fields: HeaderFields) -> BatchMetadata | None:
        """Validate an incoming batch. Returns the original batch if it is a retry of one of
        the cached batches, None if it is new; raises ProducerStateError if it must be refused."""
        if fields.producer_id < 0 or fields.attributes & CONTROL_BIT:
            return None
        entry = self.producers.get(fields.producer_id)
        if entry is None:
            return None
        if fields.producer_epoch < entry.epoch:
            raise ProducerStateError(
                INVALID_PRODUCER_EPOCH, f"epoch {fields.producer_epoch} is older than {entry.epoch}"
            )
        if fields.base_sequence == NO_SEQUENCE:  # offsets of a transaction: epoch only
            return None
        if fields.producer_epoch > entry.epoch:
            if fields.base_sequence != 0:
                raise ProducerStateError(
                    OUT_OF_ORDER_SEQUENCE_NUMBER,
                    f"a new epoch must start at sequence 0, not {fields.base_sequence}",
                )
            return None
        last = _last_sequence(fields)
        for cached in entry.batches:
            if cached.first_sequence == fields.base_sequence and cached.last_sequence == last:
                return cached
        if entry.batches and not _follows(entry.batches[-1].last_sequence, fields.base_sequence):
            expected = _next_sequence(entry.batches[-1].last_sequence)
            ahead = (fields.base_sequence - expected) % (MAX_SEQUENCE + 1) <= MAX_SEQUENCE // 2
            raise ProducerStateError(
                OUT_OF_ORDER_SEQUENCE_NUMBER,
                f"sequence {fields.base_sequence} does not follow "
                f"{entry.batches[-1].last_sequence} for producer {fields.producer_id}",
                expected if ahead else None,
            )
        return None

    def record(
        self, fields: HeaderFields, first_offset: int, commit: bool | None = None
    ) -> AbortedTxn | None:
        """Remember an appended batch (its offsets as assigned); for a control batch, `commit`
        is what its marker says. Returns the transaction an ABORT marker ended, for the log's
        aborted-transaction index."""
        if fields.producer_id < 0:
            return None
        if fields.attributes & CONTROL_BIT:
            entry = self.producers.get(fields.producer_id)
            if entry is None or fields.producer_epoch > entry.epoch:  # a fencing marker
                self.producers[fields.producer_id] = ProducerEntry(fields.producer_epoch)
            if commit is None:
                return None
            return self.complete(fields.producer_id, commit, first_offset)
        if fields.attributes & TRANSACTIONAL_BIT:
            self.ongoing.setdefault(fields.producer_id, first_offset)
        if fields.base_sequence == NO_SEQUENCE:
            entry = self.producers.get(fields.producer_id)
            if entry is None or fields.producer_epoch > entry.epoch:
                self.producers[fields.producer_id] = ProducerEntry(fields.producer_epoch)
            return None
        entry = self.producers.get(fields.producer_id)
        if entry is None or fields.producer_epoch > entry.epoch:
            entry = self.producers[fields.producer_id] = ProducerEntry(fields.producer_epoch)
        entry.last_timestamp = fields.max_timestamp
        entry.batches.append(
            BatchMetadata(
                fields.base_sequence,
                _last_sequence(fields),
                first_offset,
                first_offset + fields.last_offset_delta,
            )
        )
        return None

    def load(self, batches: Iterable[tuple[HeaderFields, bool | None]]) -> list[AbortedTxn]:
        """Rebuild from batches already in the log (their base offsets are real offsets), each
        with its marker's verdict if it is a control batch; returns the aborted transactions
        met."""
        aborted = []
        for fields, commit in batches:
            txn = self.record(fields, fields.base_offset, commit)
            if txn is not None:
                aborted.append(txn)
        return aborted
