"""Idempotent producer state of one partition: per producer id, its epoch and its last 5 batches.

A batch from an idempotent producer carries (producer id, epoch, base sequence, count). The
leader accepts it when its sequence follows the last one; answers a retry of one of the last
five batches with that batch's original offsets (nothing is appended twice); and refuses gaps
(OUT_OF_ORDER_SEQUENCE_NUMBER) and old epochs (INVALID_PRODUCER_EPOCH), as Kafka does.
State is rebuilt from batch headers when a partition is loaded.

Thread-safety: none; owned by the broker's event loop.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from weir.records import HeaderFields

CACHED_BATCHES = 5
MAX_SEQUENCE = 2**31 - 1

OUT_OF_ORDER_SEQUENCE_NUMBER = 45
INVALID_PRODUCER_EPOCH = 47


class ProducerStateError(Exception):
    def __init__(self, error_code: int, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    first_sequence: int
    last_sequence: int
    first_offset: int
    last_offset: int


@dataclass(slots=True)
class ProducerEntry:
    epoch: int
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=CACHED_BATCHES))


def _last_sequence(fields: HeaderFields) -> int:
    return (fields.base_sequence + fields.last_offset_delta) % (MAX_SEQUENCE + 1)


def _follows(last_sequence: int, first_sequence: int) -> bool:
    return first_sequence == (0 if last_sequence == MAX_SEQUENCE else last_sequence + 1)


class ProducerStateManager:
    def __init__(self) -> None:
        self.producers: dict[int, ProducerEntry] = {}

    def check(self, fields: HeaderFields) -> BatchMetadata | None:
        """Validate an incoming batch. Returns the original batch if it is a retry of one of
        the cached batches, None if it is new; raises ProducerStateError if it must be refused."""
        if fields.producer_id < 0:
            return None
        entry = self.producers.get(fields.producer_id)
        if entry is None:
            return None
        if fields.producer_epoch < entry.epoch:
            raise ProducerStateError(
                INVALID_PRODUCER_EPOCH, f"epoch {fields.producer_epoch} is older than {entry.epoch}"
            )
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
            raise ProducerStateError(
                OUT_OF_ORDER_SEQUENCE_NUMBER,
                f"sequence {fields.base_sequence} does not follow "
                f"{entry.batches[-1].last_sequence} for producer {fields.producer_id}",
            )
        return None

    def record(self, fields: HeaderFields, first_offset: int) -> None:
        """Remember an appended batch (its offsets as assigned)."""
        if fields.producer_id < 0:
            return
        entry = self.producers.get(fields.producer_id)
        if entry is None or fields.producer_epoch > entry.epoch:
            entry = self.producers[fields.producer_id] = ProducerEntry(fields.producer_epoch)
        entry.batches.append(
            BatchMetadata(
                fields.base_sequence,
                _last_sequence(fields),
                first_offset,
                first_offset + fields.last_offset_delta,
            )
        )

    def load(self, batches: Iterable[HeaderFields]) -> None:
        """Rebuild from batches already in the log (their base offsets are real offsets)."""
        for fields in batches:
            self.record(fields, fields.base_offset)
